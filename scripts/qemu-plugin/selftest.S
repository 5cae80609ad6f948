// Self-test of insn_count.c: a static aarch64 program (no libc) that runs the same counted
// region twice, with 1000 and with 3000 iterations of a loop body of known instructions, so
// that the second region minus the first is exactly 2000 times the body:
//   dot 4, mmla 3, load 10, store 7, simd 7, other 5 (total 36).
// scripts/build-qemu-plugin.sh runs it under qemu-aarch64 -cpu max and checks that difference,
// and the per-function counts (syms=FILE): region() runs 4000 bodies and 16 instructions of
// markers and return, _start 16 instructions.
    .arch armv8.6-a+dotprod+i8mm+lse
    .text
    .global _start
    .type   _start, %function       // function symbols, for the plugin's syms=FILE
_start:
    adrp    x21, buf
    add     x21, x21, :lo12:buf
    add     x22, x21, #256          // 16-byte aligned word for the exclusives and atomics
    mov     x0, #-100               // openat(AT_FDCWD, "/dev/null", O_RDONLY)
    adr     x1, devnull
    mov     x2, #0
    mov     x8, #56
    svc     #0
    mov     x19, x0
    mov     x0, #1000
    bl      region
    mov     x0, #3000
    bl      region
    mov     x0, #0                  // exit(0)
    mov     x8, #93
    svc     #0
    .size   _start, . - _start

// region(x0 = iterations): a start marker, the loop, an end marker.
    .type   region, %function
region:
    mov     x20, x0
    mov     x0, x19                 // lseek(fd, 0x5445535300000001, SEEK_SET)
    movz    x1, #1
    movk    x1, #0x5353, lsl #32
    movk    x1, #0x5445, lsl #48
    mov     x2, #0
    mov     x8, #62
    svc     #0
1:
    sdot    v0.4s, v1.16b, v2.16b           // dot
    udot    v3.4s, v1.16b, v2.4b[1]         // dot
    usdot   v0.4s, v1.16b, v2.16b           // dot
    sudot   v3.4s, v1.16b, v2.4b[3]         // dot
    smmla   v4.4s, v1.16b, v2.16b           // mmla
    ummla   v4.4s, v1.16b, v2.16b           // mmla
    usmmla  v4.4s, v1.16b, v2.16b           // mmla
    ldr     q5, [x21]                       // load
    ld1     {v6.16b}, [x21]                 // load
    ldp     x9, x10, [x21]                  // load
    ldr     w11, [x21]                      // load
    ldrb    w12, [x21, #1]                  // load
    ldr     x13, lit                        // load (literal)
    ldxr    x14, [x22]                      // load (exclusive)
    ldadd   x9, x10, [x22]                  // load (atomic read-modify-write)
    ldur    d16, [x21, #3]                  // load
    ldp     q17, q18, [x21, #32]            // load
    str     q5, [x21, #32]                  // store
    st1     {v6.16b}, [x21]                 // store
    stp     x9, x10, [x21, #64]             // store
    stxr    w15, x14, [x22]                 // store (exclusive)
    strb    w12, [x21, #5]                  // store
    stlr    x9, [x22]                       // store (release)
    stur    d16, [x21, #7]                  // store
    add     v7.4s, v7.4s, v1.4s             // simd
    fmla    v8.4s, v9.4s, v10.4s            // simd
    fadd    s1, s2, s3                      // simd
    ushr    v11.4s, v11.4s, #3              // simd
    tbl     v12.16b, {v13.16b}, v14.16b     // simd
    mov     v15.s[1], w9                    // simd
    fmov    s19, w9                         // simd
    prfm    pldl1keep, [x21]                // other
    add     x9, x9, #1                      // other
    madd    x10, x9, x9, x10                // other
    subs    x20, x20, #1                    // other
    b.ne    1b                              // other
    mov     x0, x19                 // lseek(fd, 0x5445535300000002, SEEK_SET)
    movz    x1, #2
    movk    x1, #0x5353, lsl #32
    movk    x1, #0x5445, lsl #48
    mov     x2, #0
    mov     x8, #62
    svc     #0
    ret
    .size   region, . - region

    .balign 8
lit:
    .quad   42
devnull:
    .asciz  "/dev/null"

    .bss
    .balign 64
buf:
    .space  512
