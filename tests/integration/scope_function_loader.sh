#!/bin/sh
# scope_function_loader.sh — `record --scope-function` patches GOT slots
# without calling the loader (libtrace/preload/got.c; issue 27, item 4).
# The patcher used to dlopen(RTLD_NOLOAD)/dlsym/dlclose from the tracer's
# thread; a dlsym that found the function in a library the program had
# dlopened RTLD_GLOBAL made the loader record a dependency of ours on it,
# so the program's dlclose no longer unloaded it and its next dlopen
# allocated less. tests/scope/dl_main.c asks the loader itself whether the
# library went away (its own count, independent of the trace); the heap
# calls recorded with the option must equal those recorded without it.
. tests/integration/lib.sh

S=$ROOT/tests/scope
R=3
cc -O2 -shared -fPIC -o "$T/libdldef.so" "$S/dl_def.c" &&
    cc -O2 -shared -fPIC -o "$T/libdluse.so" "$S/dl_use.c" -L"$T" -ldldef -Wl,-rpath,"$T" &&
    cc -O2 -o "$T/dl_main" "$S/dl_main.c" -ldl
check programs_built [ $? -eq 0 ]

heap() { # FILE: allocations leaked_objects unknown_frees
    "$PS" report "$1" --json --no-symbols | python3 -c "
import json, sys; d = json.load(sys.stdin)
print(d['allocations'], d['leaked_objects'], d['unknown_frees'])"
}
for scope in global local; do
    run="$T/dl_main $T/libdluse.so $T/libdldef.so $R $scope"
    $run > "$T/$scope.plain"
    check "${scope}_plain_unloads" grep -qx "rounds=$R sum=15 def_left_loaded=0" "$T/$scope.plain"
    "$PS" record --stacks none -o "$T/$scope.off.pst" -- $run > "$T/$scope.off.out" 2>/dev/null
    "$PS" record --stacks none --scope-function dl_leaf -o "$T/$scope.on.pst" -- $run > "$T/$scope.on.out" 2>/dev/null
    check "${scope}_output_unchanged" sh -c "cmp -s '$T/$scope.plain' '$T/$scope.off.out' && cmp -s '$T/$scope.plain' '$T/$scope.on.out'"
    # every call went through the patched (lazily bound) slot
    "$PS" report "$T/$scope.on.pst" --json --no-symbols > "$T/$scope.on.json"
    check "${scope}_every_call_a_scope" python3 -c "
import json; d = json.load(open('$T/$scope.on.json')); assert d['phases']['dl_leaf']['count'] == $R, d['phases']"
    off=$(heap "$T/$scope.off.pst"); on=$(heap "$T/$scope.on.pst")
    echo "  $scope: allocations leaked unknown_frees: without $off, with --scope-function $on"
    check "${scope}_same_heap_calls" sh -c '[ -n "$1" ] && [ "$1" = "$2" ]' _ "$off" "$on"
done
exit $status
