#!/bin/sh
# scope_function.sh — `record --scope-function`: calls of named functions
# recorded as scopes by hooking their GOT slots (libtrace/preload/
# hooks_func.c). Programs in tests/scope/, built here: a PLT call with
# arguments in registers, on the stack and in xmm0, errno and x87 results;
# a second thread; a library loaded with dlopen, built -fno-plt -z now (a
# GLOB_DAT slot in read-only memory); a C++ function that throws through
# the stub, from a -z now executable. The expectations are the programs'
# own counts, and their output must not change under the recorder.
. tests/integration/lib.sh

S=$ROOT/tests/scope
N=12 M=5 D=7 K=3
cc -O2 -g -shared -fPIC -o "$T/libeng.so" "$S/eng.c" &&
    cc -O2 -g -fomit-frame-pointer -shared -fPIC -o "$T/libleaf.so" "$S/leaf.c" &&
    cc -O2 -g -shared -fPIC -fno-plt -Wl,-z,now -Wl,-z,relro -o "$T/libcaller.so" "$S/caller.c" \
        -L"$T" -lleaf -Wl,-rpath,"$T" &&
    cc -O2 -g -o "$T/scope_main" "$S/main.c" -L"$T" -leng -Wl,-rpath,"$T" -ldl -pthread &&
    g++ -O2 -g -shared -fPIC -o "$T/libthrow.so" "$S/throw.cpp" &&
    g++ -O2 -g -o "$T/throw_main" "$S/throw_main.cpp" -L"$T" -lthrow -Wl,-rpath,"$T" -Wl,-z,now
check programs_built [ $? -eq 0 ]
readelf -r "$T/libcaller.so" | grep -q 'R_X86_64_GLOB_DAT.* leaf'
check caller_reaches_leaf_through_glob_dat [ $? -eq 0 ]

run="$T/scope_main $N $M $D $K $T/libcaller.so"
$run > "$T/plain.out"
check plain_run_counts grep -q "^steps=$N thread_steps=$M dl_calls=$D errno_kept=$N " "$T/plain.out"
for mode in none fp dwarf; do
    "$PS" record --stacks $mode --scope-function engine_step=decode --scope-function leaf \
        --scope-function ld_step -o "$T/$mode.pst" -- $run > "$T/$mode.out" 2> "$T/$mode.err"
    check "${mode}_output_unchanged" cmp -s "$T/plain.out" "$T/$mode.out"
    "$PS" report "$T/$mode.pst" --json --no-symbols > "$T/$mode.json" 2> "$T/$mode.rerr"
    check "${mode}_every_call_a_scope" python3 - "$T/$mode.json" $N $M $D $K <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
n, m, dl, k = map(int, sys.argv[2:])
ph = d['phases']
assert ph['decode']['count'] == n + m, ph['decode']
assert ph['leaf']['count'] == dl, ph.get('leaf')
assert ph['ld_step']['count'] == 1, ph.get('ld_step')
# each step: k allocations and k - 1 frees inside; main frees the rest
assert d['decode_steps'] == n + m and d['allocs_per_decode_step'] == k, (d['decode_steps'], d['allocs_per_decode_step'])
assert ph['decode']['heap_calls'] == (n + m) * (2 * k - 1), ph['decode']
assert ph['leaf']['heap_calls'] == 2 * dl, ph['leaf']
PY
done
# through the stub, dwarf stacks still reach the caller (main, the worker)
"$PS" report "$T/dwarf.pst" > "$T/dwarf.txt" 2>&1
check dwarf_stacks_pass_the_stub sh -c "grep -q 'engine_step (eng.c:[0-9]*) < main' '$T/dwarf.txt' && grep -q 'engine_step (eng.c:[0-9]*) < worker' '$T/dwarf.txt'"

# --phase-frame on a recorded function uses the recorded calls, no stacks needed
"$PS" record --stacks none --scope-function engine_step=step -o "$T/rec.pst" -- $run > /dev/null 2>&1
"$PS" report "$T/rec.pst" --json --phase-frame engine_step=decode > "$T/pf.json" 2> "$T/pf.err"
check phase_frame_reads_recorded_calls python3 -c "
import json; d=json.load(open('$T/pf.json'))
assert d['phases']['decode']['count'] == $N + $M and d['phases']['step']['count'] == $N + $M, d['phases']
assert d['allocs_per_decode_step'] == $K, d['allocs_per_decode_step']"
"$PS" report "$T/rec.pst" --phase-frame leaf > /dev/null 2> "$T/pfl.err"; rc=$?
check unrecorded_function_still_needs_stacks sh -c "[ $rc -eq 2 ] && grep -q 'recorded with --stacks none' '$T/pfl.err'"

# C++: an exception leaves the hooked function through the stub. Its scope
# closes at the thread's next hooked call (hooks_func.c): the throw's own
# allocations (the exception and its message) and their frees in the catch
# count inside, 4 heap calls per throw on top of the function's 2.
"$T/throw_main" 9 > "$T/cxx_plain.out"
"$PS" record --stacks dwarf --scope-function may_throw=call -o "$T/cxx.pst" -- "$T/throw_main" 9 > "$T/cxx.out" 2>/dev/null
check cxx_exceptions_pass_the_stub sh -c "grep -qx 'calls=9 caught=3 sum=27' '$T/cxx.out' && cmp -s '$T/cxx_plain.out' '$T/cxx.out'"
"$PS" report "$T/cxx.pst" --json > "$T/cxx.json"
check cxx_every_call_a_scope python3 -c "
import json; d=json.load(open('$T/cxx.json')); c=d['phases']['call']
assert c['count'] == 9 and c['heap_calls'] == 9 * 2 + 3 * 4, c"

# found by a second reader: a hooked call first thing on a coroutine stack
# under a guard page; a lazily bound call of an old symbol version; a
# non-PIE program that takes the function's address (its canonical PLT
# entry must not become the stub's target), lazy and bound at load
cc -O2 -o "$T/coro" "$S/coro.c" && cc -O2 -o "$T/oldver" "$S/oldver.c" &&
    cc -O2 -shared -fPIC -o "$T/libcdef.so" "$S/canon_def.c" &&
    cc -O2 -shared -fPIC -o "$T/libcuse.so" "$S/canon_use.c" -L"$T" -lcdef -Wl,-rpath,"$T" &&
    cc -O2 -no-pie -fno-pie -o "$T/canon" "$S/canon_main.c" -L"$T" -lcuse -lcdef -Wl,-rpath,"$T" &&
    cc -O2 -no-pie -fno-pie -o "$T/canon_now" "$S/canon_main.c" -L"$T" -lcuse -lcdef -Wl,-rpath,"$T" -Wl,-z,now
check reader_programs_built [ $? -eq 0 ]
for c in "coro getpid 1" "oldver realpath 1" "canon foo 102" "canon_now foo 102"; do
    set -- $c
    "$T/$1" > "$T/$1.plain" 2>&1
    "$PS" record --stacks none --scope-function $2 -o "$T/$1.pst" -- "$T/$1" > "$T/$1.out" 2>/dev/null
    check "$1_output_unchanged" cmp -s "$T/$1.plain" "$T/$1.out"
    "$PS" report "$T/$1.pst" --json > "$T/$1.json" 2>/dev/null
    check "$1_calls_counted" python3 -c "
import json; d=json.load(open('$T/$1.json')); assert d['phases']['$2']['count'] == $3, d['phases']"
done
grep -qx '(null) errno=Invalid argument' "$T/oldver.plain"
check oldver_is_the_old_version [ $? -eq 0 ]

# bad specs are refused before the program runs
"$PS" record --scope-function 'a,b' -o "$T/bad.pst" -- true 2> "$T/bad.err"; rc=$?
check bad_spec_refused sh -c "[ $rc -eq 2 ] && [ ! -e '$T/bad.pst' ] && grep -q 'scope-function' '$T/bad.err'"
"$PS" record --scope-function setjmp -o "$T/sj.pst" -- true 2> "$T/sj.err"; rc=$?
check returns_twice_refused sh -c "[ $rc -eq 2 ] && [ ! -e '$T/sj.pst' ] && grep -q 'returns twice' '$T/sj.err'"
exit $status
