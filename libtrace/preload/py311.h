/* py311.h — where CPython 3.11 keeps what python.c reads (64-bit builds):
 * byte offsets into private structures (PyThreadState, _PyCFrame,
 * _PyInterpreterFrame, PyCodeObject, the compact str layouts). They change
 * with each minor version of the interpreter, so python.c reads them only
 * after Py_Version said 3.11. tests/python/pyoffsets.c checks every one
 * against Python.h and internal/pycore_frame.h at compile time
 * (tests/integration/python_frames.sh builds it where the headers are). */
#ifndef POOLSCOPE_PY311_H
#define POOLSCOPE_PY311_H

enum {
    TS_CFRAME = 56,          /* PyThreadState.cframe */
    CF_CURRENT = 8,          /* _PyCFrame.current_frame */
    IF_CODE = 32,            /* _PyInterpreterFrame.f_code */
    IF_PREVIOUS = 48,        /* .previous */
    IF_PREV_INSTR = 56,      /* .prev_instr */
    IF_IS_ENTRY = 68,        /* .is_entry (bool) */
    IF_OWNER = 69,           /* .owner (char); FRAME_OWNED_BY_GENERATOR = 1 */
    CO_FIRSTLINENO = 72,     /* PyCodeObject.co_firstlineno */
    CO_FILENAME = 112,
    CO_QUALNAME = 128,
    CO_FIRSTTRACEABLE = 168, /* ._co_firsttraceable (code units) */
    CO_CODE = 184,           /* .co_code_adaptive: the first code unit */
    OB_TYPE = 8,             /* PyObject.ob_type */
    U_LENGTH = 16,           /* PyASCIIObject.length */
    U_STATE = 32,            /* .state: kind bits 2-4, compact bit 5, ascii bit 6 */
    U_ASCII_DATA = 48,       /* sizeof(PyASCIIObject) */
    U_COMPACT_DATA = 72,     /* sizeof(PyCompactUnicodeObject) */
    OWNED_BY_GENERATOR = 1,
};

#endif
