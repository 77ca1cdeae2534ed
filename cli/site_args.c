/* site_args.c — parsing of the site options (see site_args.h). */
#include "site_args.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char cli_sites_help[] =
    "  --depth N          frames per site label: the first meaningful one and\n"
    "                     N-1 callers (default 2)\n"
    "  --skip-frame PAT   skip frames matching PAT too when naming a site (a glob\n"
    "                     on the demangled function, or file:GLOB on its source\n"
    "                     path; repeatable); README \"Sites\" lists the defaults\n"
    "  --no-skip          skip no frame: name sites by their innermost frame\n";

int cli_sites_take(cli_sites_t *cs, const char *cmd, const char *opt, const char *v)
{
    if (!strcmp(opt, "--depth")) {
        char *end;
        long n = strtol(v, &end, 10);
        if (!*v || *end || n < 1 || n > 64) { cli_cmd_err(cmd, "--depth: '%s' is not a depth from 1 to 64", v); return CLI_USAGE; }
        cs->o->depth = (unsigned)n;
        return 0;
    }
    if (cs->o->n_skip >= CLI_SITE_PATTERNS) { cli_cmd_err(cmd, "--skip-frame: at most %d patterns", CLI_SITE_PATTERNS); return CLI_USAGE; }
    if (!*v) { cli_cmd_err(cmd, "--skip-frame needs a pattern"); return CLI_USAGE; }
    cs->pats[cs->o->n_skip++] = v;
    cs->o->skip = cs->pats;
    return 0;
}
