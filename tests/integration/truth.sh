# truth.sh — the report of a trace against counts that do not come from our
# own code: the traced program's own count of what it allocated, freed,
# leaked and held at its peak (tests/progs/truth_*.c), and heaptrack's count
# of the same program.
#
#  1. truth_handoff (producers malloc, consumers on other threads free) in
#     two shapes, truth_taskpool (a submitter allocates tasks and payloads
#     with malloc/calloc/realloc, workers realloc and free them) in two
#     shapes, and truth_handoff's churn mode (4 threads, ~6% of the frees
#     on another thread): under `poolscope record --stacks none`, the
#     report's leaked objects, leaked bytes and peak live bytes equal the
#     program's own exactly, and no free is of an unknown address.
#  2. The same programs under heaptrack: heaptrack agrees with the program
#     (a check of the program itself), and the report's allocation calls,
#     leaked objects, leaked bytes and peak equal heaptrack's.
#  3. truth_ticks: the trace's timestamps of known 1 MiB mallocs lie within
#     the resolution the trace states of the CLOCK_MONOTONIC interval the
#     program read around each, and the stated resolution is at most
#     RES_NS; again beside nproc+1 busy loops (the tracer's thread starved).
#  4. truth_die: a program killed by a signal (or ended by exit from another
#     thread) has every malloc it counted in its trace, `record` exits with
#     the status of the untraced run, and the program's own SIGSEGV handler
#     still runs under the tracer.
#  5. stress -t 16: no free of an unknown address (stress frees only what it
#     allocated); its leak figures are printed for information.
#  6. a C++ program: leaks equal its own count (the C++ runtime's emergency
#     pool is freed at exit, not reported as a leak).
#  7. the peak across threads: truth_handoff without its burst, where the
#     program's own highest count of its live bytes (a malloc counted after
#     it returned, a free before it was called) is a lower bound of what
#     was really live. Each event's cycle count orders the threads' events
#     within a tick (FORMAT.md, "Cycles"), so the report's peak must not be
#     below the program's count, nor above it by more than what the
#     program does not count (glibc's per-thread DTVs and stdio's buffer:
#     2,128 B in every run; 8 KiB allowed), and the range over the orders
#     the trace cannot tell apart (peak_live_tick_min/max_bytes) must close
#     on it (within 1%); over several runs, the last ones beside nproc+1
#     busy loops. Without the counts the merge's estimate was 1.7-2x the
#     program's count and the range 5x wide.
#
# Both runs of a program (ours and heaptrack's, and the untraced one) use
# GLIBC_TUNABLES=glibc.pthread.stack_cache_size=0: glibc callocs each new
# thread's DTV in pthread_create and frees it only when the thread's stack
# leaves glibc's stack cache, which is never at the default cache size. With
# the cache off the DTVs are freed at pthread_join, so the only objects
# leaked at exit are the program's own.
#
# heaptrack's own interposer is C++ and brings libstdc++, whose constructor
# allocates its exception emergency pool before main (and frees it at exit
# through __libc_freeres); our runs do not load libstdc++. Heaptrack's raw
# data (`a`/`+`/`-` records of the .zst/.gz file) is read here directly for
# exact bytes, and every allocation whose innermost frame lies in libstdc++
# is set apart (the programs are C, so that is the emergency pool and only
# it); how many there were is printed.
. tests/integration/lib.sh
ROOT=$PWD
case $BUILD in /*) B=$BUILD ;; *) B=$ROOT/$BUILD ;; esac
PS=$B/bin/poolscope P=$B/tests/progs DUMP=$B/tests/progs/pstdump
GLIBC_TUNABLES=glibc.pthread.stack_cache_size=0
export GLIBC_TUNABLES
ulimit -c 0 2>/dev/null || :

# The time resolution the trace format promises for every event's
# timestamp: at most 1 ms (docs/DESIGN.md, "Time and order"; the tick itself
# is 100 us, libtrace/FORMAT.md "Time"); put the stated figure here.
RES_NS=${TRUTH_RES_NS:-1000000}

key() { sed -n "s/^$2=//p" "$1" | head -1; }
# a top-level number of `report --json` (pretty-printed: two spaces, key)
jnum() { sed -n "s/^  \"$2\": \([0-9][0-9]*\).*/\1/p" "$1" | head -1; }
# one count of the `calls` object of `report --json`
jcall() { sed -n "/^  \"calls\": {/,/^  }/s/^    \"$2\": \([0-9][0-9]*\).*/\1/p" "$1" | head -1; }
# every allocating call of the malloc family, from `report --json`
jalloc_calls() {
    s=0
    for f in malloc calloc realloc reallocarray posix_memalign aligned_alloc memalign valloc pvalloc; do
        v=$(jcall "$1" $f); s=$((s + ${v:-0}))
    done
    echo $s
}
# Frees of unknown addresses: `report --json` has no key for them (yet), so
# the text report's "anomalies" line is read; the line is printed only when
# there are some. A JSON key of a likely name is used when present.
unknown_frees() {   # $1 report.json $2 report.txt
    for k in unmatched_frees unknown_frees frees_of_unknown_addresses; do
        v=$(jnum "$1" $k); [ -n "$v" ] && { echo "$v"; return; }
    done
    grep -q 'leaked at exit' "$2" || { echo "?"; return; }
    v=$(sed -n 's/.* \([0-9,][0-9,]*\) frees of unknown addresses.*/\1/p' "$2" | tr -d , | head -1)
    echo "${v:-0}"
}
eq() {   # eq WHAT OURS WANT [WHOSE]: equal, or say so on stderr
    [ -n "$2" ] && [ -n "$3" ] && [ "$2" = "$3" ] && return 0
    echo "  $1: ours ${2:-none}, ${4:-program} ${3:-none}" >&2
    return 1
}

# Heaptrack's raw data -> "calls leaked_objects leaked_bytes peak_bytes
# stdcxx_calls stdcxx_bytes", the first four without the allocations whose
# innermost frame is in libstdc++. Strings (s), instruction pointers (i: ip,
# module string), trace nodes (t: ip index, parent) are numbered from 1,
# allocation infos (a: size, trace) from 0; `+ n` / `- n` allocate / free
# one object of allocation info n, in heaptrack's (serialized) order.
ht_figures() {
    case $1 in
    *.zst) zstd -dc "$1" ;; *.gz) gzip -dc "$1" ;; *) cat "$1" ;;
    esac | awk '
        BEGIN { na = 0 }
        function hex(s,   i, v) {
            v = 0; s = tolower(s)
            for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
            return v
        }
        $1 == "s" { ns++; x = $0; sub(/^s [0-9a-fA-F]+ /, "", x); str[ns] = x; next }
        $1 == "i" { ni++; imod[ni] = hex($3); next }
        $1 == "t" { nt++; tip[nt] = hex($2); next }
        $1 == "a" { sz[na] = hex($2); tr = hex($3)
                    cxx[na] = (tr in tip) && (tip[tr] in imod) && str[imod[tip[tr]]] ~ /libstdc\+\+/
                    na++; next }
        $1 == "+" { k = hex($2)
                    if (cxx[k]) { ec++; eb += sz[k]; next }
                    calls++; n++; live += sz[k]; if (live > peak) peak = live; next }
        $1 == "-" { k = hex($2); if (cxx[k]) next
                    n--; live -= sz[k]; next }
        END { printf "%d %d %d %d %d %d\n", calls, n, live, peak, ec, eb }'
}

# ---- 1 and 2: leaks, unknown frees and peak against the program and heaptrack

# Sections 1, 2 and 5 need an exact cross-thread order: the versions of
# format 1.3 (FORMAT.md, "Versions"). TRUTH_ORDER=0 leaves them out.
CASES="handoff_4p3c handoff_2p6c taskpool_w3 taskpool_w8 churn_4t threadexit"
[ "${TRUTH_ORDER:-1}" = 1 ] || { CASES=; echo "  order checks (sections 1, 2, 5): left out (TRUTH_ORDER=0)" >&2; }
args_of() {
    case $1 in
    handoff_4p3c) echo "truth_handoff 4 3 25000 1000" ;;
    handoff_2p6c) echo "truth_handoff 2 6 50000 1500" ;;
    taskpool_w3)  echo "truth_taskpool 3 50000 700" ;;
    taskpool_w8)  echo "truth_taskpool 8 50000 1100" ;;
    churn_4t)     echo "truth_handoff churn 4 250000 60 500" ;;
    threadexit)   echo "truth_threadexit 8 300" ;;
    esac
}
KEYS='^(allocs|frees|leaked_objects|leaked_bytes|peak_live_bytes)='

HAVE_HT=1
command -v heaptrack >/dev/null && command -v heaptrack_print >/dev/null || HAVE_HT=0

for c in $CASES; do
    set -- $(args_of $c)
    prog=$1; shift
    run() {
        "$P/$prog" "$@" >"$T/$c.plain" 2>"$T/$c.plain.err" || { cat "$T/$c.plain.err" >&2; return 1; }
        "$PS" record --stacks none -o "$T/$c.pst" -- "$P/$prog" "$@" >"$T/$c.out" 2>"$T/$c.rec" ||
            { cat "$T/$c.rec" >&2; return 1; }
        "$PS" report "$T/$c.pst" --json >"$T/$c.json" && "$PS" report "$T/$c.pst" >"$T/$c.txt" || return 1
        # the program's figures do not depend on timing: the same traced
        grep -E "$KEYS" "$T/$c.plain" >"$T/$c.plain.keys"
        grep -E "$KEYS" "$T/$c.out" | cmp -s - "$T/$c.plain.keys" || { diff "$T/$c.plain" "$T/$c.out" >&2; return 1; }
        [ -n "$(key "$T/$c.out" peak_live_bytes)" ]
    }
    check ${c}_runs_traced run "$@"
    o=$T/$c.out j=$T/$c.json
    lo=$(jnum "$j" leaked_objects) lb=$(jnum "$j" leaked_bytes) pk=$(jnum "$j" peak_live_bytes)
    uf=$(unknown_frees "$j" "$T/$c.txt")
    echo "  $c: program leaked $(key "$o" leaked_objects) objects $(key "$o" leaked_bytes) B, peak $(key "$o" peak_live_bytes) B;" \
        "report leaked ${lo:-?} objects ${lb:-?} B, peak ${pk:-?} B, ${uf} frees of unknown addresses," \
        "$(jnum "$j" lost_events) lost events" \
        "(cross-thread frees: $(key "$o" cross_thread_frees) of $(key "$o" frees))" >&2
    check ${c}_leaked_objects_equal_program eq leaked_objects "$lo" "$(key "$o" leaked_objects)"
    check ${c}_leaked_bytes_equal_program eq leaked_bytes "$lb" "$(key "$o" leaked_bytes)"
    check ${c}_no_unknown_frees eq frees_of_unknown_addresses "$uf" 0 expected
    check ${c}_peak_live_equal_program eq peak_live_bytes "$pk" "$(key "$o" peak_live_bytes)"
    check ${c}_no_lost_events eq lost_events "$(jnum "$j" lost_events)" 0 expected
    case $prog in
    truth_handoff) check ${c}_malloc_calls_equal_program eq calls.malloc "$(jcall "$j" malloc)" "$(key "$o" allocs)" ;;
    truth_taskpool)
        calls_exact() {
            eq calls.malloc "$(jcall "$j" malloc)" "$(key "$o" mallocs)" &&
                eq calls.realloc "$(jcall "$j" realloc)" "$(key "$o" reallocs)"
        }
        check ${c}_malloc_realloc_calls_equal_program calls_exact ;;
    esac

    [ $HAVE_HT = 1 ] || { echo "  no heaptrack: $c heaptrack checks skipped" >&2; continue; }
    ht() {
        HT_OK=0
        rm -f "$T/ht_$c".*
        heaptrack -o "$T/ht_$c" "$P/$prog" "$@" >"$T/ht_$c.log" 2>&1 || { tail "$T/ht_$c.log" >&2; return 1; }
        f=$(ls "$T/ht_$c".* | grep -v '\.log$' | head -1)
        [ -n "$f" ] || return 1
        ht_figures "$f" >"$T/ht_$c.fig" || return 1
        read -r h_calls h_lo h_lb h_pk h_ec h_eb <"$T/ht_$c.fig" || return 1
        echo "  $c: heaptrack $h_calls allocation calls, leaked $h_lo objects $h_lb B, peak $h_pk B" \
            "(set apart: $h_ec libstdc++ allocations, $h_eb B); report $(jalloc_calls "$j") allocation calls" >&2
        grep -E "$KEYS" "$T/ht_$c.log" >"$T/ht_$c.keys"
        grep -E "$KEYS" "$T/$c.plain" | cmp -s - "$T/ht_$c.keys" ||
            { echo "  the program printed other figures under heaptrack" >&2; return 1; }
        HT_OK=1
    }
    check ${c}_runs_under_heaptrack ht "$@"
    [ $HT_OK = 1 ] || continue
    # heaptrack checks the program's own count (our code is not involved)
    ht_program() {
        eq leaked_objects "$h_lo" "$(key "$o" leaked_objects)" && eq leaked_bytes "$h_lb" "$(key "$o" leaked_bytes)" &&
            eq peak_live_bytes "$h_pk" "$(key "$o" peak_live_bytes)"
    }
    check ${c}_heaptrack_agrees_with_program ht_program
    check ${c}_allocation_calls_equal_heaptrack eq allocation_calls "$(jalloc_calls "$j")" "$h_calls" heaptrack
    leaks_ht() { eq leaked_objects "$lo" "$h_lo" heaptrack && eq leaked_bytes "$lb" "$h_lb" heaptrack; }
    check ${c}_leaks_equal_heaptrack leaks_ht
    check ${c}_peak_live_equal_heaptrack eq peak_live_bytes "$pk" "$h_pk" heaptrack
done

# ---- 7: the peak across threads: the stated range holds the program's own count
peak_bound() { # RUN: one traced run of truth_handoff without its burst
    f=$T/pb$1
    "$PS" record --stacks none -o "$f.pst" -- "$P/truth_handoff" 4 3 25000 0 noburst >"$f.out" 2>"$f.rec" ||
        { cat "$f.rec" >&2; return 1; }
    "$PS" report "$f.pst" --json >"$f.json" || return 1
    own=$(key "$f.out" peak_live_bytes) pk=$(jnum "$f.json" peak_live_bytes)
    lo=$(jnum "$f.json" peak_live_tick_min_bytes) hi=$(jnum "$f.json" peak_live_tick_max_bytes)
    echo "  peak run $1: program's own highest count $own B; report's peak ${pk:-?} B," \
        "over the orders the trace cannot tell apart ${lo:-?}..${hi:-?} B" >&2
    [ -n "$own" ] && [ -n "$pk" ] && [ -n "$lo" ] && [ -n "$hi" ] && [ "$own" -gt 0 ] &&
        [ "$pk" -ge "$own" ] && [ "$pk" -le $((own + 8192)) ] &&
        [ "$lo" -le "$pk" ] && [ "$pk" -le "$hi" ] && [ $(((hi - lo) * 100)) -le "$hi" ]
}
if [ "${TRUTH_ORDER:-1}" = 1 ]; then
    for i in 1 2 3; do check peak_equals_program_count_run$i peak_bound $i; done
    pb_load=
    for i in $(seq 0 "$(nproc)"); do sh -c 'while :; do :; done' >/dev/null 2>&1 & pb_load="$pb_load $!"; done
    for i in 4 5 6; do check peak_equals_program_count_loaded_run$i peak_bound $i; done
    kill $pb_load 2>/dev/null; wait $pb_load 2>/dev/null
fi

# ---- 3: timestamps of known instants

K=10 mono=
# START_MONO (header tag 6) of a trace: the header is "PSTRACE\0", u16
# major, u16 minor, u32 tlv_len, then varint tag, varint len, value fields.
start_mono() {
    od -An -v -tu1 -N 65536 "$1" | awk '
        { for (i = 1; i <= NF; i++) b[n++] = $i }
        END {
            if (n < 16) exit 1
            e = 16 + b[12] + b[13] * 256 + b[14] * 65536 + b[15] * 16777216; p = 16
            while (p < e && p < n) {
                tag = 0; s = 1; do { c = b[p++]; tag += (c % 128) * s; s *= 128 } while (c >= 128)
                len = 0; s = 1; do { c = b[p++]; len += (c % 128) * s; s *= 128 } while (c >= 128)
                if (tag == 6) { for (i = 0; i < len; i++) printf "%d ", b[p + i]; exit 0 }
                p += len
            }
            exit 1
        }' >"$T/mono.bytes" || return 1
    v=0 sh_=0     # the varint in 64-bit shell arithmetic (awk has doubles)
    for byte in $(cat "$T/mono.bytes"); do v=$((v | ((byte & 127) << sh_))); sh_=$((sh_ + 7)); done
    echo $v
}
# ticks_run [PAIRS_PER_WAKE]: truth_ticks recorded (its churn thread makes
# PAIRS_PER_WAKE pairs per 100 us wake: 1 makes it too sparse to keep the
# tick moving by its own events)
ticks_run() {
    rm -f "$T"/ticks.*
    "$PS" record --stacks none -o "$T/ticks.pst" -- "$P/truth_ticks" $K "$@" >"$T/ticks.out" 2>"$T/ticks.rec" ||
        { cat "$T/ticks.rec" >&2; return 1; }
    [ "$(key "$T/ticks.out" count)" = $K ] || return 1
    "$PS" sql "$T/ticks.pst" -o "$T/ticks.sqlite" >/dev/null || return 1
    sqlite3 "$T/ticks.sqlite" "SELECT ts_ns FROM events WHERE type = 1 AND size_bytes = 1048576 ORDER BY id;" >"$T/ticks.ts" ||
        return 1
    [ "$(grep -c . "$T/ticks.ts")" -eq $K ] || { echo "  $(grep -c . "$T/ticks.ts") 1 MiB mallocs in the trace, want $K" >&2; return 1; }
    mono=$(start_mono "$T/ticks.pst") && [ -n "$mono" ] || { echo "  no START_MONO in the header" >&2; return 1; }
}
# ticks_within: every 1 MiB malloc's time lies within what the trace states
# (`report`'s time_resolution_ns) of the CLOCK_MONOTONIC interval the
# program read around it, and what it states is at most RES_NS: the tracer
# keeps its times within that whatever the load (its own thread starved).
ticks_within() {
    m0=$(key "$T/ticks.out" mono0_ns) i=0 bad=0 worst=0
    [ -s "$T/ticks.ts" ] && [ -n "$m0" ] && [ -n "$mono" ] || return 1
    said=$("$PS" report "$T/ticks.pst" --json --no-symbols | sed -n 's/.*"time_resolution_ns": *\([0-9]*\).*/\1/p')
    [ -n "$said" ] || { echo "  report states no time_resolution_ns" >&2; return 1; }
    while read -r ts; do
        b=$(key "$T/ticks.out" t${i}_ns) e=$(key "$T/ticks.out" t${i}_end_ns)
        [ -n "$b" ] && [ -n "$e" ] && [ -n "$ts" ] || return 1
        lo=$((m0 + b)) hi=$((m0 + e)) at=$((mono + ts))
        if [ $at -lt $lo ]; then d=$((lo - at)); elif [ $at -gt $hi ]; then d=$((at - hi)); else d=0; fi
        [ $d -gt $worst ] && worst=$d
        if [ $d -gt $said ]; then
            echo "  malloc $i: trace at $((at - m0)) ns, program [$b, $e] ns (from its first): off by $d ns" >&2
            bad=1
        fi
        i=$((i + 1))
    done <"$T/ticks.ts"
    echo "  ticks: worst distance from the program's interval $worst ns; the trace states $said ns (at most $RES_NS)" >&2
    [ "$said" -le "$RES_NS" ] || { echo "  the stated resolution is over $RES_NS ns" >&2; bad=1; }
    [ $bad = 0 ]
}
check ticks_runs_traced ticks_run
check ticks_within_resolution ticks_within
# The same beside nproc+1 busy loops, the churn thread sparse: every core
# busy, the tracer's thread gets a core late (before the events kept the
# tick fresh themselves: 1.8 to 10 ms stated, 5.5 ms seen).
busy=""
for i in $(seq 0 "$(nproc)"); do (while :; do :; done) & busy="$busy $!"; done
trap 'kill $busy 2>/dev/null; rm -rf "$T"' EXIT
K=20
check ticks_loaded_runs_traced ticks_run 1
kill $busy 2>/dev/null; wait $busy 2>/dev/null
trap 'rm -rf "$T"' EXIT
check ticks_loaded_within_resolution ticks_within

# ---- 4: dying programs

MODES="abort segv bus fpe ill term int handler early exit_thread"
plain= ours=
for m in $MODES; do
    die_run() {
        # (the inner shell's "Segmentation fault" notices go to /dev/null)
        plain=$({ (cd "$T" && exec "$P/truth_die" $m 3>"$T/die_$m.plain.n" >"$T/die_$m.plain.out" \
            2>"$T/die_$m.plain.err"); echo $?; } 2>/dev/null)
        ours=$({ (cd "$T" && exec "$PS" record --stacks none -o "$T/die_$m.pst" -- "$P/truth_die" $m \
            3>"$T/die_$m.n" >"$T/die_$m.out" 2>"$T/die_$m.err"); echo $?; } 2>/dev/null)
        echo "  die $m: untraced exit $plain, record exit $ours; program allocs $(key "$T/die_$m.n" allocs)" >&2
        [ $plain -ne 0 ] && [ $plain -ne 2 ] && [ $plain -ne 99 ] && [ -n "$(key "$T/die_$m.plain.n" allocs)" ]
    }
    check die_${m}_runs die_run
    check die_${m}_record_status_equals_untraced eq exit_status "$ours" "$plain" untraced
    die_counts() {
        n=$(key "$T/die_$m.n" allocs)
        [ -n "$n" ] && [ -f "$T/die_$m.pst" ] || { echo "  no count or no trace" >&2; return 1; }
        "$DUMP" "$T/die_$m.pst" >"$T/die_$m.dump" || return 1
        got=$(key "$T/die_$m.dump" malloc) lost=$(key "$T/die_$m.dump" lost)
        [ -n "$got" ] && [ -n "$lost" ] || return 1
        if [ $m = exit_thread ]; then
            # every malloc is in the trace or counted as lost, none is invented
            [ "$got" -le "$n" ] && [ $((got + lost)) -ge "$n" ] && return 0
            echo "  malloc events $got + lost $lost, program $n" >&2
            return 1
        fi
        eq malloc_events "$got" "$n" || { echo "  (lost $lost, truncated $(key "$T/die_$m.dump" truncated))" >&2; return 1; }
    }
    check die_${m}_malloc_events_equal_program die_counts
done
own_handler() {
    grep -qx 'own_handler=ran' "$T/die_handler.plain.out" || { echo "  untraced: no marker" >&2; return 1; }
    grep -qx 'own_handler=ran' "$T/die_handler.out" || { echo "  traced: the program's handler did not run" >&2; return 1; }
}
check die_handler_own_handler_runs_traced own_handler

# ---- 5: stress -t 16

stress_run() {
    (cd "$T" && "$PS" record --stacks none -o "$T/stress.pst" -- "$P/stress" -t 16) >"$T/stress.out" 2>"$T/stress.err" ||
        { cat "$T/stress.err" >&2; return 1; }
    "$PS" report "$T/stress.pst" --json >"$T/stress.json" && "$PS" report "$T/stress.pst" >"$T/stress.txt" || return 1
    echo "  stress -t 16: program frees every block it allocates ($(key "$T/stress.out" free) frees," \
        "$(sed -n 's/^cross_thread_frees=//p' "$T/stress.err") cross-thread); report leaked" \
        "$(jnum "$T/stress.json" leaked_objects) objects $(jnum "$T/stress.json" leaked_bytes) B," \
        "$(unknown_frees "$T/stress.json" "$T/stress.txt") frees of unknown addresses" >&2
}
if [ "${TRUTH_ORDER:-1}" = 1 ]; then
    check stress16_runs_traced stress_run
    check stress16_no_unknown_frees eq frees_of_unknown_addresses "$(unknown_frees "$T/stress.json" "$T/stress.txt")" 0 expected
fi
# ---- 6: a C++ program: the runtime's emergency pool is not a leak
# (libstdc++ allocates it before main and frees it only in
# __gnu_cxx::__freeres, which the interposer calls at exit as heaptrack and
# valgrind do); the report's leaks equal the program's own count.
if command -v g++ >/dev/null 2>&1; then
    cxx_run() {
        g++ -O2 -o "$T/truth_leaks" tests/cxx/truth_leaks.cpp || return 1
        "$PS" record --stacks none -o "$T/cxx.pst" -- "$T/truth_leaks" 5 >"$T/cxx.out" 2>"$T/cxx.rec" ||
            { cat "$T/cxx.rec" >&2; return 1; }
        "$PS" report "$T/cxx.pst" --json >"$T/cxx.json"
    }
    check cxx_runs_traced cxx_run
    echo "  cxx: program leaked $(key "$T/cxx.out" leaked_objects) objects $(key "$T/cxx.out" leaked_bytes) B;" \
        "report leaked $(jnum "$T/cxx.json" leaked_objects) objects $(jnum "$T/cxx.json" leaked_bytes) B" >&2
    check cxx_leaked_objects_equal_program eq leaked_objects "$(jnum "$T/cxx.json" leaked_objects)" "$(key "$T/cxx.out" leaked_objects)"
    check cxx_leaked_bytes_equal_program eq leaked_bytes "$(jnum "$T/cxx.json" leaked_bytes)" "$(key "$T/cxx.out" leaked_bytes)"
else
    echo "  no g++: the C++ check is skipped (make deps installs it)" >&2
fi

exit $status
