/*
 * A stand-in for Windows' bcryptprimitives.dll, for running lathe's Windows
 * build under Debian 12's wine 8.0 in CI only (never shipped).
 *
 * Rust's standard library (1.78 and later) seeds its randomness with
 * ProcessPrng from bcryptprimitives.dll, which every Windows since 8 has and
 * wine 8.0 does not: without this, every Rust program fails to start under
 * that wine (exit status 53, "bcryptprimitives.dll not found"). This one
 * answers ProcessPrng with RtlGenRandom (advapi32's SystemFunction036), which
 * wine implements. .ci/install-cross builds it with mingw-w64 and puts it in
 * the wine prefix's system32.
 */
#include <windows.h>
#define SystemFunction036 NTAPI SystemFunction036
#include <ntsecapi.h>
#undef SystemFunction036

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!RtlGenRandom(data, n)) {
            return FALSE;
        }
        data += n;
        len -= n;
    }
    return TRUE;
}
