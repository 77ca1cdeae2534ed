#!/bin/sh
# folded_order.sh — `export --format folded` writes its lines in the order
# a byte sort of the whole lines gives (what flamegraph tools and diffs of
# two exports expect), though it builds them as a tree of frames
# (analyzer/export.c). Function names that are prefixes of each other are
# the hard case: "grow2" (with '2' below ';') sorts between "grow" and
# "grow;...", "grow_x" after both. The expected lines and their weights
# are this program's own allocations, written out by hand.
. tests/integration/lib.sh

cat > "$T/prefix.c" <<'C'
#include <stdlib.h>
void *keep[8];
__attribute__((noinline)) void *grow2(size_t n) { return malloc(n); }
__attribute__((noinline)) void *grow_x(size_t n) { return malloc(n); }
__attribute__((noinline)) void *grow(size_t n) { return n > 100 ? grow2(n) : malloc(n); }
int main(void)
{
    keep[0] = grow(10);      /* main;grow 10 */
    keep[1] = grow(200);     /* main;grow;grow2 200 */
    keep[2] = grow2(30);     /* main;grow2 30 */
    keep[3] = grow_x(40);    /* main;grow_x 40 */
    keep[4] = grow(11);      /* main;grow: 21 in all */
    return keep[0] == keep[1];
}
C
cc -O0 -g -fno-omit-frame-pointer -fno-inline -o "$T/prefix" "$T/prefix.c"
"$PS" record --stacks fp -o "$T/p.pst" -- "$T/prefix" > /dev/null 2>&1
"$PS" export "$T/p.pst" --format folded -o "$T/p.folded"
# the lines through main, the part from main on
grep ';main;\|^main;' "$T/p.folded" | sed 's/.*;main;/main;/; s/^main;/main;/' > "$T/mine"
cat > "$T/want" <<'W'
main;grow 21
main;grow2 30
main;grow;grow2 200
main;grow_x 40
W
check prefix_names_in_byte_order cmp "$T/want" "$T/mine"
# the whole file, by its text (the weight after the last space cut off)
sed 's/ [0-9]*$//' "$T/p.folded" > "$T/texts"
check whole_file_sorted env LC_ALL=C sort -c "$T/texts"
check no_text_twice sh -c "[ \$(sort '$T/texts' | uniq -d | wc -l) -eq 0 ]"
exit $status
