/* cmd_sql.c — `poolscope sql FILE -o DB [--phase NAME] [--from T --to T] [--indexes]`:
 * argument parsing; the work is analyzer/sqlite.c (schema in
 * analyzer/SCHEMA.md).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "sqlite.h"
#include "units.h"

void cmd_sql_help(FILE *out)
{
    fputs("usage: poolscope sql FILE -o DB.sqlite [--phase NAME] [--from T --to T] [--indexes]\n\n"
          "Load a trace into a new SQLite database. It is built beside DB and renamed\n"
          "over it when complete: an existing DB is replaced only by a finished one and\n"
          "only when it is an SQLite database (or empty),\n"
          "a DB that is the trace (also through a link) or not a regular file is\n"
          "refused. FILE may be - (standard input, a pipe).\n"
          "Views: allocations (each heap object: allocation and free, lifetime, sizes,\n"
          "site, threads), events (every event, type names), sites (totals per site).\n"
          "Tables: threads, stacks, frames (symbolized), modules, markers, scopes, pools,\n"
          "blocks, rss, metrics (the report's numbers by dotted name), meta, event_types.\n"
          "Times are ts_ns (ns since trace start), sizes *_bytes.\n"
          "Schema and example queries: SCHEMA.md.\n"
          "Documents: share/doc/poolscope/ under the install prefix (REPORT.md: the\n"
          "metrics keys; SCHEMA.md; FORMAT.md), analyzer/ and libtrace/ in the source.\n\n"
          "  -o, --output DB the database to write\n"
          "  --phase NAME    select the events while a scope of marker NAME is open\n"
          "  --from T --to T select the events in [T, T'] since trace start; T like\n"
          "                  1.5s, 200ms, 30us, 100ns (plain number: seconds)\n"
          "                  With a selection every event is still loaded: the\n"
          "                  events.in_window column marks those selected (join the\n"
          "                  other tables on event_id), metrics holds the report's\n"
          "                  numbers for the selection only (as report with the same\n"
          "                  options), meta records it. Without: in_window is 1.\n"
          "  --phase-frame FUNC[=NAME]  scopes from call stacks, as in report: they\n"
          "                  reach the metrics table (the markers table holds the trace's own)\n"
          "  --indexes       also index the tables that grow with the trace (heap objects\n"
          "                  by address, free and stack; other events by type and time;\n"
          "                  pool and block events by pool): fast lookups of one address\n"
          "                  or stretch of events, a slower load, about twice the size\n"
          "  --quiet         no summary line\n", out);
    fputs(cli_symbols_help, out);
    fputs("\n"
          "Exit: 0, or 2 for bad usage, an unreadable trace, a phase the trace does not\n"
          "have (the message lists those it has; no database is left) or a failed write.\n", out);
}

typedef struct sql_args {
    az_sql_opts_t o;
    cli_frames_t frames;
    int given;                   /* --from 1, --to 2 */
} sql_args_t;

/* --from T, --to T */
static int take(void *ctx, const char *opt, const char *v)
{
    sql_args_t *sa = ctx;
    if (!strcmp(opt, "--phase-frame")) return cli_frames_take(&sa->frames, "sql", v);
    return cli_time_take("sql", opt, v, &sa->o.from, &sa->o.to, &sa->given);
}

int cmd_sql(int argc, char **argv)
{
    const char *file = NULL, *db = NULL;
    int quiet = 0, indexes = 0;
    sql_args_t sa = { 0 };
    const cli_opt_t opts[] = {
        { "-o --output", NULL, &db, NULL }, { "--quiet", &quiet, NULL, NULL },
        { "--indexes", &indexes, NULL, NULL },
        { "--phase", NULL, &sa.o.phase, NULL }, { "--from --to --phase-frame", NULL, NULL, take },
        { NULL, NULL, NULL, NULL },
    };
    cli_args_t args = { "sql", cmd_sql_help, opts, &sa, &file, 1, 0 };
    int rc = cli_parse_args(&args, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    if (!file || !db) { cli_cmd_err("sql", "usage: poolscope sql FILE -o DB.sqlite"); return CLI_USAGE; }
    sa.o.indexes = indexes;
    sa.o.phase_frames = sa.frames.specs;
    sa.o.n_phase_frames = sa.frames.n;
    if (sa.o.phase && !*sa.o.phase) { cli_cmd_err("sql", "--phase needs a marker name"); return CLI_USAGE; }
    if (cli_window_done("sql", sa.given, &sa.o.window, sa.o.from, &sa.o.to)) return CLI_USAGE;
    az_sql_stats_t st;
    int warn;
    char msg[512];
    cli_progress_t pg;
    if (cli_progress_start(&pg, "sql", file)) { sa.o.progress = cli_progress; sa.o.progress_ctx = &pg; }
    int sql_rc = az_sql_write_opts(file, db, &sa.o, &st, &warn, msg, sizeof msg);
    cli_progress_done(&pg);
    if (sql_rc) return cli_file_err("sql", file, msg);
    if (warn) cli_warn_damaged("sql", file, "loaded");
    if (!quiet) {
        printf("%s: %llu events", db, (unsigned long long)st.events);
        if (sa.o.phase || sa.o.window) printf(" (%llu in the selection)", (unsigned long long)st.events_in_window);
        printf(", %llu heap objects, %llu stacks, %llu frames, %llu markers, %llu pool rows, %llu block rows"
               " in %.2f s (%.2f M events/s)\n",
               (unsigned long long)st.allocations, (unsigned long long)st.stacks, (unsigned long long)st.frames,
               (unsigned long long)st.markers, (unsigned long long)st.pool_rows, (unsigned long long)st.block_rows,
               st.seconds, st.seconds > 0 ? (double)st.events / st.seconds / 1e6 : 0.0);
    }
    return cli_stdout_done("sql", CLI_OK);
}
