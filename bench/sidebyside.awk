# sidebyside.awk: the median of repeated ddl-bench and mpi-bench runs, side by
# side, as a Markdown table for docs/benchmarks.md.
#
#   awk -v ranks=N [-v left=TAG] [-v right=TAG] -f bench/sidebyside.awk FILE...
#
# Input lines: "TAG SIZE TIME_US", one per size and run (the benches' rows
# reduced to size and time); TAG is "mpi" for Open MPI and "ddl" (or the
# left=TAG given, e.g. "ring" for a forced algorithm) for ddl; right=TAG
# puts another ddl run (e.g. "host" memory) in Open MPI's place.  For each size: the median
# time of each side over its runs, the bus bandwidth computed from it
# (nccl-tests: size/time * 2(n-1)/n), ddl's busbw over Open MPI's, and the
# spread (slowest/fastest run) of each side.
function median(list,    n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++)
        for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) {
            t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
        }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function spread(list,    n, a, i, lo, hi) {
    n = split(list, a, " ")
    lo = hi = a[1]
    for (i = 2; i <= n; i++) {
        if (a[i] + 0 < lo + 0) lo = a[i]
        if (a[i] + 0 > hi + 0) hi = a[i]
    }
    return lo > 0 ? hi / lo : 0
}
{
    if (!($2 in seen)) { seen[$2] = 1; order[++nsizes] = $2 }
    t[$1, $2] = t[$1, $2] " " $3
}
END {
    if (left == "") left = "ddl"
    if (right == "") right = "mpi"
    f = ranks > 1 ? 2 * (ranks - 1) / ranks : 1
    name = left == "ddl" ? "ddl" : "ddl " left
    rname = right == "mpi" ? "Open MPI" : "ddl " right
    ratio = right == "mpi" ? "ddl/MPI" : left "/" right
    rshort = right == "mpi" ? "MPI" : right
    print "| size (B) | " name " µs | " name " busbw GB/s | " rname " µs | " rname " busbw GB/s | " ratio " busbw | spread ddl, " rshort " |"
    print "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for (i = 1; i <= nsizes; i++) {
        s = order[i]
        d = median(t[left, s]); m = median(t[right, s])
        bd = d > 0 ? s / d / 1000 * f : 0; bm = m > 0 ? s / m / 1000 * f : 0
        printf "| %d | %.2f | %.3f | %.2f | %.3f | %.2f | %.2f, %.2f |\n", s, d, bd, m, bm,
            (bm > 0 ? bd / bm : 0), spread(t[left, s]), spread(t[right, s])
    }
}
