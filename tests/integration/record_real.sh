# record_real.sh — real programs under `poolscope record`: their output must
# be what it is without the tracer, and their traces readable and complete.
# python3 (its mmap'd arenas must show), the sqlite3 shell, gcc following
# exec into cc1 and as, git, a C++ program built with g++, a pthread program.
. tests/integration/lib.sh

# traced NAME CMD...: run CMD plain and recorded (in $T/NAME.d as cwd), same
# stdout and status; every trace listed complete. Leaves $T/NAME.listed.
traced() {
    n=$1; shift
    mkdir -p "$T/$n.d" "$T/$n.e"
    (cd "$T/$n.d" && "$@") >"$T/$n.plain" 2>/dev/null; prc=$?
    rm -rf "$T/$n.d"; mkdir -p "$T/$n.d"
    set -f; (cd "$T/$n.d" && "$PS" record -o "$T/$n.e/t.pst" ${REC_OPTS:-} -- "$@") >"$T/$n.out" 2>"$T/$n.err"; trc=$?; set +f
    [ $prc -eq $trc ] || { echo "  $n: exit $trc traced, $prc plain" >&2; cat "$T/$n.err" >&2; return 1; }
    cmp -s "$T/$n.plain" "$T/$n.out" || { echo "  $n: output differs" >&2; diff "$T/$n.plain" "$T/$n.out" | head >&2; return 1; }
    sed -n 's/^poolscope: pid [0-9]*: \(.*\): [0-9]* events.*/\1/p' "$T/$n.err" >"$T/$n.listed"
    [ -s "$T/$n.listed" ] || { echo "  $n: no trace listed" >&2; cat "$T/$n.err" >&2; return 1; }
    for f in $(cat "$T/$n.listed"); do
        "$DUMP" "$f" >"$f.dump" && [ "$(key "$f.dump" complete)" = 1 ] ||
            { echo "  $n: $f not complete" >&2; return 1; }
    done
}

PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
python_arenas() {
    [ -n "$PY" ] || { echo "  no python3: skipped" >&2; return 0; }
    traced py "$PY" -c '
d = {}
l = []
for i in range(200000):
    d[i] = str(i) * 3
    l.append((i, [i] * 4))
print(len(d), sum(len(v) for v in d.values()), len(l))
del d, l' || return 1
    f=$(head -1 "$T/py.listed")
    [ "$(key "$f.dump" mmap_anon)" -ge 5 ] && [ "$(key "$f.dump" malloc)" -ge 1000 ] ||
        { echo "  python: too few anonymous mmaps (arenas)" >&2; cat "$f.dump" >&2; return 1; }
}
check python3_arenas_in_trace python_arenas

sqlite_shell() {
    command -v sqlite3 >/dev/null || { echo "  no sqlite3: skipped" >&2; return 0; }
    cat >"$T/q.sql" <<'SQL'
CREATE TABLE t(id INTEGER PRIMARY KEY, s TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 20000)
INSERT INTO t SELECT x, printf('row %d', x) FROM c;
CREATE INDEX ts ON t(s);
SELECT count(*), sum(id), max(s) FROM t;
SQL
    traced sqlite sqlite3 db.sqlite -init "$T/q.sql" -batch '.quit' || return 1
    f=$(head -1 "$T/sqlite.listed")
    [ "$(key "$f.dump" malloc)" -ge 1000 ]
}
check sqlite3_shell sqlite_shell

gcc_follow() {
    printf '#include <stdio.h>\nint main(void){puts("hi");return 0;}\n' >"$T/hello.c"
    # "*[1s]": cc1 and the assembler (as, or x86_64-linux-gnu-as), not collect2/ld
    REC_OPTS="--follow-exec *[1s]" traced gcc gcc -c -O2 "$T/hello.c" -o "$T/hello.o" || return 1
    for f in $(cat "$T/gcc.listed"); do basename "$(key "$f.dump" exe)"; done | sort >"$T/gcc.exes"
    grep -qx cc1 "$T/gcc.exes" && grep -qE '(^|-)as$' "$T/gcc.exes" ||
        { echo "  traced images: $(cat "$T/gcc.exes" | tr '\n' ' ')" >&2; return 1; }
    [ -s "$T/hello.o" ]
}
check gcc_follow_exec_cc1_as gcc_follow

git_run() {
    command -v git >/dev/null || { echo "  no git: skipped" >&2; return 0; }
    export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
    export GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' GIT_COMMITTER_DATE='2020-01-01T00:00:00Z'
    export GIT_CONFIG_NOSYSTEM=1 HOME=$T
    traced gitinit sh -c 'git init -q r && cd r && echo a >a && git add a && git commit -qm first && git log --format="%H %s"'
}
check git_init_commit_log git_run

cxx_prog() {
    command -v g++ >/dev/null || { echo "  no g++: skipped" >&2; return 0; }
    cat >"$T/p.cc" <<'CXX'
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>
int main() {
    std::map<std::string, std::vector<int>> m;
    for (int i = 0; i < 20000; i++) m[std::to_string(i % 500)].push_back(i);
    std::vector<std::unique_ptr<std::string>> v;
    for (int i = 0; i < 10000; i++) v.push_back(std::make_unique<std::string>(100, 'x'));
    long s = 0;
    for (auto &kv : m) for (int x : kv.second) s += x;
    std::cout << m.size() << " " << s << " " << v.size() << std::endl;
}
CXX
    g++ -O2 -o "$T/cxx" "$T/p.cc" || return 1
    traced cxx "$T/cxx" || return 1
    f=$(head -1 "$T/cxx.listed")
    # 10000 strings of 100 chars (object + buffer each), map nodes, vector growth
    [ "$(key "$f.dump" malloc)" -ge 20000 ] && [ "$(key "$f.dump" free)" -ge 20000 ]
}
check cxx_program cxx_prog

check pthread_program traced thr "$P/threads" 10 8 500
exit $status
