#!/bin/sh
# Every subcommand's --help tells the truth about its options (issue 30,
# item 7): the options each parses are read from the source (cli/*.c: a
# cli_opt_t table, a getopt_long `struct option` table and its short
# option string, or the spellings a hand loop compares; plus the shared
# options cli_parse_args takes for the subcommands common_args.c's
# shared_opts table names), the options each documents from its help (the
# usage lines and the lines that begin with an option); an option parsed
# but not documented, or documented but not parsed, fails. The formats
# export and report accept (their strcmp's) are each in their help, and
# every export format is in `poolscope --help`. Each spelling documented
# is then given to the command: it must not be refused as unknown.
. tests/integration/lib.sh

python3 - "$PS" <<'EOF' || status=1
import glob, re, subprocess, sys

ps = sys.argv[1]
src = {f: open(f).read() for f in sorted(glob.glob('cli/*.c'))}
bad = []
ok = []

def help_of(cmd):
    r = subprocess.run([ps, 'help', cmd], capture_output=True, text=True)
    return r.stdout

def body(name):
    """The source of function `name` (its definition to the closing brace)."""
    for f, s in src.items():
        m = re.search(r'\n(?:static\s+)?int\s+' + name + r'\s*\([^)]*\)\s*\n\{\n', s)
        if m:
            end = s.index('\n}\n', m.end())
            return s[m.end():end]
    return None

def strings(s):
    return re.findall(r'"((?:[^"\\]|\\.)*)"', s)

def parsed(cmd, fn):
    b = body(fn)
    if b is None:
        bad.append('%s: no definition of %s in cli/*.c' % (cmd, fn)); return set()
    opts = set()
    m = re.search(r'cli_opt_t\s+opts\[\]\s*=\s*\{(.*?)\n\s*\};', b, re.S)
    if m:                                   # the table cli_parse_args reads
        for s in strings(m.group(1)):
            opts.update(w for w in s.split() if w.startswith('-'))
        whole = src['cli/common_args.c']
        t = re.search(r'shared_opts\[\]\s*=\s*\{(.*?)\n\};', whole, re.S)
        if not t:
            bad.append('cli/common_args.c: no shared_opts table'); return opts
        for names, cmds in re.findall(r'\{\s*"([^"]*)",\s*"([^"]*)"\s*\}', t.group(1)):
            if cmd in cmds.split(): opts.update(names.split())
        return opts
    # getopt_long, in the command's file (its loop may be in a helper)
    whole = next(s for s in src.values() if re.search(r'\nint\s+' + fn + r'\s*\(', s))
    m = re.search(r'struct option\s+\w+\[\]\s*=\s*\{(.*?)\n\s*\};', whole, re.S)
    g = re.search(r'getopt_long\([^,]+,[^,]+,\s*"([^"]*)"', whole)
    if m and g:                             # getopt_long
        opts.update('--' + n for n in re.findall(r'\{\s*"([\w-]+)"\s*,', m.group(1)))
        opts.update('-' + c for c in re.findall(r'[A-Za-z]', g.group(1)))
        return opts
    # a hand loop: the spellings it compares
    opts.update(s for s in strings(b) if re.fullmatch(r'--?[A-Za-z][\w-]*', s))
    return opts

def documented(text):
    opts = set()
    for line in text.splitlines():
        # what is quoted or in parentheses names other commands' options
        t = re.sub(r'`[^`]*`|\([^()]*\)', '', line).strip()
        if t.startswith(('-', '[', 'usage:', 'poolscope ')):
            opts.update(re.findall(r'(?<![\w./`-])(--?[A-Za-z][\w-]*)', t))
    return opts

table = re.search(r'cli_cmd_t commands\[\]\s*=\s*\{(.*?)\n\};', src['cli/poolscope.c'], re.S)
cmds = re.findall(r'\{\s*"(\w+)",\s*"((?:[^"\\]|\\.)*)",\s*(\w+),\s*(\w+)\s*\}', table.group(1))
if len(cmds) < 10: bad.append('read %d commands from cli/poolscope.c' % len(cmds))
top = subprocess.run([ps, '--help'], capture_output=True, text=True).stdout
# commands sharing one help (attach, detach) are held to it together
by_help = {}
for name, summary, run, helpfn in cmds:
    if run != 'NULL': by_help.setdefault(helpfn, set()).update(parsed(name, run))
for name, summary, run, helpfn in cmds:
    if run == 'NULL': continue
    p = by_help[helpfn] - {'-h', '--help'}
    h = help_of(name)
    d = documented(h) - {'-h', '--help'}
    if not p and not d: bad.append('%s: no option read from either side' % name)
    for o in sorted(p - d): bad.append('%s: parses %s, its --help does not list it' % (name, o))
    for o in sorted(d - p): bad.append('%s: its --help lists %s, which it does not parse' % (name, o))
    # every spelling documented is taken: "unknown option" is the refusal
    for o in sorted(d & p):
        r = subprocess.run([ps, name, o], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=20)
        if 'unknown option' in r.stderr:
            bad.append('%s: %s refused: %s' % (name, o, r.stderr.strip()[:120]))
    ok.append('%s %d' % (name, len(p)))
    # the formats it compares a value with (export's and report's --format)
    b = body(run) or ''
    for var in ('fmt', 'format'):
        for f in re.findall(r'strcmp\(' + var + r',\s*"(\w+)"\)', b):
            if not re.search(r'\b' + f + r'\b', h): bad.append('%s: --format %s not in its help' % (name, f))
            if name == 'export':
                line = next((l for l in top.splitlines() if l.split()[:1] == ['export']), '')
                if not re.search(r'\b' + f + r'\b', line):
                    bad.append('poolscope --help: export line does not name %s: %r' % (f, line))
for b in bad: print('  ' + b, file=sys.stderr)
print('  options per command: ' + ', '.join(ok), file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
[ $status = 0 ] && echo "ok help_options_match_parsing" || echo "not ok help_options_match_parsing"
# getopt_long's other habits in the shared parser: "--" ends the options
# (a trace whose name starts with '-'), and a short option's value may be
# joined to it (-oFILE); each gives what the spelled-out form gives
"$PS" record -o "$T/t.pst" -- "$P/churn" 2000 >/dev/null 2>&1
cp "$T/t.pst" "$T/-t.pst"
(cd "$T" && "$PS" report --json ./-t.pst >plain.json 2>/dev/null && "$PS" report --json -- -t.pst >dashdash.json 2>/dev/null)
# the same report but for the file's name as given
check double_dash_ends_options sh -c "[ -s '$T/plain.json' ] && grep -q '\"trace\": \"-t.pst\"' '$T/dashdash.json' &&
    grep -v '\"trace\"' '$T/plain.json' > '$T/p' && grep -v '\"trace\"' '$T/dashdash.json' > '$T/d' && cmp -s '$T/p' '$T/d'"
"$PS" export --format folded -o "$T/a.folded" "$T/t.pst" 2>/dev/null
"$PS" export --format folded "-o$T/b.folded" "$T/t.pst" 2>/dev/null
check short_option_value_joined sh -c "[ -s '$T/a.folded' ] && cmp -s '$T/a.folded' '$T/b.folded'"
exit $status
