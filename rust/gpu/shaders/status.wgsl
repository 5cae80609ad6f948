// Reports of kernels that check their input (indices out of range): the first report of a
// compute wins. `status` is a storage buffer of 8 words cleared before the compute: word 0
// counts the reports, words 1 .. 5 hold the first one (the node's tag, the bad value, and up to
// three coordinates saying where it was found).

fn report(tag: u32, value: u32, c0: u32, c1: u32, c2: u32) {
    if atomicAdd(&status[0], 1u) == 0u {
        atomicStore(&status[1], tag);
        atomicStore(&status[2], value);
        atomicStore(&status[3], c0);
        atomicStore(&status[4], c1);
        atomicStore(&status[5], c2);
    }
}
