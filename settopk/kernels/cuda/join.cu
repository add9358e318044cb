// The threshold join's filters and verification on the GPU, one thread per candidate entry
// (settopk/kernels/cuda/join.py launches it; settopk/kernels/join/arrays.py describes the join).
//
// A candidate entry pairs a probe group x's prefix token at position i with an index group y
// holding that token at position j (a posting of y's prefix). Each thread:
//   1. positional filter: min(|x| - i, |y| - j) >= need, with no overlap counted before (i, j);
//   2. bitmap filter: (|x| + |y| - popcount(sig[x] ^ sig[y])) / 2 >= need (Sandes, Teodoro, Melo,
//      "Bitmap filter: speeding up exact set similarity joins with bitwise operations",
//      Information Systems 2020);
//   3. keeps the entry only if (i, j) is the pair's first common token (no token of x[:i] is in
//      y[:j]; tokens ascend in both sets, so a merge of the two heads decides it): each pair of
//      groups is verified once, by the entry of its first common token, with no sort and no
//      per-pair state. A passing pair's first common token lies in both prefixes (prefix filter)
//      and passes step 1 (the overlap before it is 0), so no passing pair is lost;
//   4. verifies by merging x[i+1:] and y[j+1:], leaving as soon as the tokens left cannot reach
//      the need (PPJoin's verification: Xiao, Wang, Lin, Yu, WWW 2008). A pair that reaches it
//      was merged to the end, so its count is the exact overlap.
// Passing pairs go to out_* at slots taken by an atomic counter, which counts every passing pair
// even past `cap` (the caller launches again with room for all of them).

namespace settopk {

// The candidate entry g's probe entry: the first p with ends[p] > g (ends: inclusive prefix sum).
__device__ __forceinline__ long long owning_entry(const long long* __restrict__ ends, long long n, long long g) {
    long long lo = 0, hi = n;
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (ends[mid] > g) hi = mid; else lo = mid + 1;
    }
    return lo;
}

__global__ void join_verify(const long long* __restrict__ ends, long long n_live, const int* __restrict__ probe_group,
                            const int* __restrict__ probe_pos, const long long* __restrict__ first_posting,
                            const int* __restrict__ posting_group, const int* __restrict__ posting_pos,
                            const int* __restrict__ x_tokens, const long long* __restrict__ x_offsets,
                            const int* __restrict__ x_len, const unsigned long long* __restrict__ x_sig,
                            const int* __restrict__ y_tokens, const long long* __restrict__ y_offsets,
                            const int* __restrict__ y_len, const unsigned long long* __restrict__ y_sig,
                            const int* __restrict__ need, int n_col, long long begin, long long stop,
                            int* __restrict__ out_x, int* __restrict__ out_y, int* __restrict__ out_overlap,
                            unsigned long long* __restrict__ out_n, unsigned long long cap) {
    const long long g = begin + static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (g >= stop) return;
    const long long p = owning_entry(ends, n_live, g);
    const long long posting = first_posting[p] + (g - (p ? ends[p - 1] : 0));
    const int x = probe_group[p], i = probe_pos[p];
    const int y = posting_group[posting], j = posting_pos[posting];
    const int lx = x_len[x], ly = y_len[y];
    const int nd = need[static_cast<long long>(lx) * n_col + ly];
    if (min(lx - i, ly - j) < nd) return;
    if ((lx + ly - __popcll(x_sig[x] ^ y_sig[y])) / 2 < nd) return;
    const int* a = x_tokens + x_offsets[x];
    const int* b = y_tokens + y_offsets[y];
    int u = 0, v = 0;
    while (u < i && v < j) {  // a common token before (i, j): another entry verifies this pair
        const int ta = a[u], tb = b[v];
        if (ta == tb) return;
        u += ta < tb;
        v += tb < ta;
    }
    int count = 1;
    u = i + 1;
    v = j + 1;
    while (u < lx && v < ly) {
        if (count + min(lx - u, ly - v) < nd) return;
        const int ta = a[u], tb = b[v];
        count += ta == tb;
        u += ta <= tb;
        v += tb <= ta;
    }
    if (count < nd) return;
    const unsigned long long at = atomicAdd(out_n, 1ull);
    if (at < cap) {
        out_x[at] = x;
        out_y[at] = y;
        out_overlap[at] = count;
    }
}

}  // namespace settopk
