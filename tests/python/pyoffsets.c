/* pyoffsets.c — libtrace/preload/py311.h against CPython 3.11's own headers.
 * Built by tests/integration/python_frames.sh where python3.11-dev is
 * installed: it compiles only if every offset python.c reads is right, and
 * prints the unicode state bits it decodes from a real string. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#include <stddef.h>
#include <stdio.h>

#include "py311.h"

#if PY_MAJOR_VERSION != 3 || PY_MINOR_VERSION != 11
#error "these are CPython 3.11's layouts"
#endif

_Static_assert(offsetof(PyThreadState, cframe) == TS_CFRAME, "tstate->cframe");
_Static_assert(offsetof(_PyCFrame, current_frame) == CF_CURRENT, "cframe->current_frame");
_Static_assert(offsetof(_PyInterpreterFrame, f_code) == IF_CODE, "frame->f_code");
_Static_assert(offsetof(_PyInterpreterFrame, previous) == IF_PREVIOUS, "frame->previous");
_Static_assert(offsetof(_PyInterpreterFrame, prev_instr) == IF_PREV_INSTR, "frame->prev_instr");
_Static_assert(offsetof(_PyInterpreterFrame, is_entry) == IF_IS_ENTRY, "frame->is_entry");
_Static_assert(offsetof(_PyInterpreterFrame, owner) == IF_OWNER, "frame->owner");
_Static_assert(FRAME_OWNED_BY_GENERATOR == OWNED_BY_GENERATOR, "FRAME_OWNED_BY_GENERATOR");
_Static_assert(offsetof(PyCodeObject, co_firstlineno) == CO_FIRSTLINENO, "co_firstlineno");
_Static_assert(offsetof(PyCodeObject, co_filename) == CO_FILENAME, "co_filename");
_Static_assert(offsetof(PyCodeObject, co_qualname) == CO_QUALNAME, "co_qualname");
_Static_assert(offsetof(PyCodeObject, _co_firsttraceable) == CO_FIRSTTRACEABLE, "_co_firsttraceable");
_Static_assert(offsetof(PyCodeObject, co_code_adaptive) == CO_CODE, "co_code_adaptive");
_Static_assert(sizeof(_Py_CODEUNIT) == 2, "a code unit is 2 bytes");
_Static_assert(offsetof(PyObject, ob_type) == OB_TYPE, "ob_type");
_Static_assert(offsetof(PyASCIIObject, length) == U_LENGTH, "str length");
_Static_assert(offsetof(PyASCIIObject, state) == U_STATE, "str state");
_Static_assert(sizeof(PyASCIIObject) == U_ASCII_DATA, "compact ASCII data follows PyASCIIObject");
_Static_assert(sizeof(PyCompactUnicodeObject) == U_COMPACT_DATA, "compact data follows PyCompactUnicodeObject");

int main(void)
{
    /* the bit positions python.c decodes (kind 2-4, compact 5, ascii 6),
     * from a state word set field by field */
    PyASCIIObject o;
    memset(&o, 0, sizeof o);
    o.state.kind = PyUnicode_2BYTE_KIND;
    o.state.compact = 1;
    o.state.ascii = 0;
    uint32_t w;
    memcpy(&w, (char *)&o + U_STATE, sizeof w);
    int ok = ((w >> 2) & 7) == PyUnicode_2BYTE_KIND && (w & 32) && !(w & 64);
    o.state.ascii = 1;
    memcpy(&w, (char *)&o + U_STATE, sizeof w);
    ok = ok && (w & 64);
    printf("state_bits=%s\n", ok ? "ok" : "wrong");
    return !ok;
}
