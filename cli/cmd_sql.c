/* cmd_sql.c — `poolscope sql FILE -o DB`: argument parsing; the work is
 * analyzer/sqlite.c (schema in analyzer/SCHEMA.md).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "sqlite.h"

void cmd_sql_help(FILE *out)
{
    fputs("usage: poolscope sql FILE -o DB.sqlite\n\n"
          "Load a trace into a new SQLite database. It is built beside DB and renamed\n"
          "over it when complete: an existing DB is replaced only by a finished one,\n"
          "a DB that is the trace (also through a link) or not a regular file is\n"
          "refused. FILE may be - (standard input, a pipe).\n"
          "Tables: events, stacks, frames (symbolized), modules, markers, pools, blocks,\n"
          "rss, metrics (the report's numbers by dotted name), meta, event_types.\n"
          "Schema and example queries: analyzer/SCHEMA.md.\n\n"
          "  -o DB       the database to write\n"
          "  --quiet     no summary line\n\n"
          "Exit: 0, or 2 for bad usage, an unreadable trace or a failed write.\n", out);
}

int cmd_sql(int argc, char **argv)
{
    const char *file = NULL, *db = NULL;
    int quiet = 0;
    const cli_opt_t opts[] = {
        { "-o --output", NULL, &db, NULL }, { "--quiet", &quiet, NULL, NULL }, { NULL, NULL, NULL, NULL },
    };
    cli_args_t args = { "sql", cmd_sql_help, opts, NULL, &file, 1, 0 };
    int rc = cli_parse_args(&args, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    if (!file || !db) { cli_cmd_err("sql", "usage: poolscope sql FILE -o DB.sqlite"); return CLI_USAGE; }
    az_sql_stats_t st;
    int warn;
    char msg[512];
    cli_progress_t pg = { "sql", file, 0 };
    int sql_rc = az_sql_write_progress(file, db, &st, &warn, cli_progress_wanted() ? cli_progress : NULL,
                                       &pg, msg, sizeof msg);
    cli_progress_done(&pg);
    if (sql_rc) return cli_file_err("sql", file, msg);
    if (warn) cli_warn_damaged("sql", file, "loaded");
    if (!quiet)
        printf("%s: %llu events, %llu stacks, %llu frames, %llu markers, %llu pool rows, %llu block rows in %.2f s (%.2f M events/s)\n",
               db, (unsigned long long)st.events, (unsigned long long)st.stacks, (unsigned long long)st.frames,
               (unsigned long long)st.markers, (unsigned long long)st.pool_rows, (unsigned long long)st.block_rows,
               st.seconds, st.seconds > 0 ? (double)st.events / st.seconds / 1e6 : 0.0);
    return cli_stdout_done("sql", CLI_OK);
}
