/* site_args.h — the site options report and export share: --skip-frame
 * PATTERN (repeatable), --depth N (meaningful frames per site label),
 * --no-skip (a flag the command binds to sites.no_skip). */
#ifndef POOLSCOPE_CLI_SITE_ARGS_H
#define POOLSCOPE_CLI_SITE_ARGS_H

#include "sites.h"

#define CLI_SITE_PATTERNS 64

typedef struct cli_sites {
    az_sv_opts_t *o;                        /* where the options go */
    const char *pats[CLI_SITE_PATTERNS];    /* --skip-frame values, o->skip points here */
} cli_sites_t;

/* Help lines for the three options. */
extern const char cli_sites_help[];

/* Handles opt ("--skip-frame" or "--depth") with value v for command cmd:
 * 0, or CLI_USAGE after one line on stderr. */
int cli_sites_take(cli_sites_t *cs, const char *cmd, const char *opt, const char *v);

#endif
