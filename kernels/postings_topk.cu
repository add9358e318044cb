// Exact candidate emission through an inverted index: the CUDA half of
// kernels/postings_gpu.py. It is compiled after bitslice_topk.cu in one NVRTC
// program (the loader concatenates the two sources), so encode_candidate and
// the Score enum are shared and the keys are those of the scan.
//
// Layout (built by kernels/postings_gpu.py): docs are cut into tiles of
// kPostTile = 65536 consecutive positions. post holds, for every (token, tile)
// segment in token-major order, the positions of the tile's docs that hold the
// token, as uint16 offsets inside the tile, ascending; segment
// s = token * n_tiles + tile is post[seg_start[s] : seg_start[s + 1]]. Two bytes
// per doc id plus 8 bytes per (token, tile).
//
// postings_emit: ScanCount (Sarawagi and Kirpal, SIGMOD 2004; Li, Lu, Lu,
// ICDE 2008) over the docs at positions below `limit` (the whole shard, or a
// prefix of it as a sampling level). One block per (routed query, part); a
// part is every gridDim.y-th tile, so a block reads the query's ids and its
// least overlap once and walks several tiles. Per tile, the block adds one per
// postings entry of the query's ids into one byte counter per doc of the tile
// (shared memory, four counters per 32-bit word; an overlap never exceeds
// max_len <= 255, so a byte never carries), which gives every nonzero overlap
// of the tile exactly. The bounds of all the tile's segments are loaded while
// the previous tile is counted, their lengths summed, and the threads walk the
// concatenated segments as one flat range with several loads in flight: a walk
// segment by segment, one block per tile, waited on dependent loads and ran
// 3 to 5 times slower (jobs.bench sti2-uniform).
//
// A doc whose counter reaches need, the least overlap any doc length needs for
// key >= T (the minimum of the query's thr_ge row, at least 1), is listed
// once, when it reaches it; a listed doc below `limit` is emitted with its
// exact key when it is as good as the bound (key > T, or key == T and
// position <= P), like count_emit's emission, so on the whole shard both paths
// emit the same set of docs with key >= 1. The host sends a query's whole-shard
// level here only when T >= 1, so no doc outside the postings (overlap 0,
// key 0) can qualify; a sampling level may emit any subset of the qualifying
// docs, and emits those with overlap >= 1. When the list overflows, every
// counter of the tile is checked instead (exact either way). Emission counts
// every candidate past the buffer's capacity, as count_emit.

namespace settopk {

constexpr int kPostTileBits = 16;
constexpr int kPostTile = 1 << kPostTileBits;
constexpr int kPostListCap = 4096;
constexpr int kPostThreads = 512;
constexpr int kPostMaxIds = 256;   // max_len <= 255
constexpr int kPostUnroll = 8;     // postings entries in flight per thread

// Dynamic shared memory: kPostTile / 4 words of byte counters (64 KiB).
__global__ void __launch_bounds__(kPostThreads)
postings_emit(const unsigned short* __restrict__ post, const long long* __restrict__ seg_start, int n_tiles,
              int n_words, long long limit, const int* __restrict__ route, const long long* __restrict__ qoff,
              const unsigned short* __restrict__ qtok, const int* __restrict__ qlen,
              const unsigned char* __restrict__ thr_ge, int max_doc_len, const long long* __restrict__ bound_key,
              const int* __restrict__ tie_pos, const unsigned char* __restrict__ len_by_pos, long long scale,
              int score, int* __restrict__ cand_count, const long long* __restrict__ cand_base,
              const int* __restrict__ cand_cap, unsigned long long* __restrict__ cand) {
    extern __shared__ uint4 s_count4[];
    unsigned* s_count = reinterpret_cast<unsigned*>(s_count4);
    __shared__ unsigned short s_list[kPostListCap];
    __shared__ long long s_beg[kPostMaxIds];  // start in post of the tile's segment of id i
    __shared__ int s_pre[kPostMaxIds + 1];    // entries before that segment
    __shared__ int s_n_list;
    __shared__ int s_need;

    const int q = route[blockIdx.x];
    const int ql = qlen[q];
    const int n_len = max_doc_len + 1;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const long long n_tiles_used = (limit + kPostTile - 1) >> kPostTileBits;
    if (tid == 0) {
        s_need = 255;
        s_pre[0] = 0;
    }
    __syncthreads();
    int need_part = 255;  // the least overlap over all doc lengths: a warp minimum, then one atomic per warp
    for (int l = tid; l < n_len; l += blockDim.x)
        need_part = min(need_part, static_cast<int>(thr_ge[static_cast<long long>(q) * n_len + l]));
    for (int d = 16; d > 0; d >>= 1) need_part = min(need_part, __shfl_xor_sync(0xFFFFFFFFu, need_part, d));
    if (lane == 0 && need_part < 255) atomicMin(&s_need, need_part);
    // Thread i < ql owns id i: its segment of the next tile is loaded one tile ahead.
    long long seg_row = -1;
    if (tid < ql) {
        const int t = qtok[qoff[q] + tid];
        if (t < n_words) seg_row = static_cast<long long>(t) * n_tiles;  // no doc holds an id above the largest
    }
    long long next_b = 0, next_e = 0;
    int tile = blockIdx.y;
    if (seg_row >= 0 && tile < n_tiles_used) {
        next_b = seg_start[seg_row + tile];
        next_e = seg_start[seg_row + tile + 1];
    }
    const long long bound = bound_key[q];
    const int last = tie_pos[q];
    for (; tile < n_tiles_used; tile += gridDim.y) {
        for (int i = tid; i < kPostTile / 16; i += blockDim.x) s_count4[i] = make_uint4(0u, 0u, 0u, 0u);
        if (tid < ql) {
            s_beg[tid] = next_b;
            s_pre[tid + 1] = static_cast<int>(next_e - next_b);
            const int after = tile + gridDim.y;
            if (seg_row >= 0 && after < n_tiles_used) {
                next_b = seg_start[seg_row + after];
                next_e = seg_start[seg_row + after + 1];
            }
        }
        if (tid == 0) s_n_list = 0;
        __syncthreads();
        if (tid < 32) {  // inclusive prefix sum of s_pre[1..ql] by one warp, 8 entries per lane
            const int lo = 1 + tid * 8;
            int run = 0;
            for (int i = lo; i < lo + 8 && i <= ql; ++i) run += s_pre[i];
            int incl = run;
            for (int d = 1; d < 32; d <<= 1) {
                const int v = __shfl_up_sync(0xFFFFFFFFu, incl, d);
                if (tid >= d) incl += v;
            }
            int acc = incl - run;
            for (int i = lo; i < lo + 8 && i <= ql; ++i) {
                acc += s_pre[i];
                s_pre[i] = acc;
            }
        }
        __syncthreads();
        const int need = max(s_need, 1);
        const int total = s_pre[ql];
        for (int base = tid; base < total; base += kPostUnroll * kPostThreads) {
            unsigned p[kPostUnroll];
            int seg = 0;
#pragma unroll
            for (int u = 0; u < kPostUnroll; ++u) {
                const int idx = base + u * kPostThreads;
                p[u] = 0xFFFFFFFFu;
                if (idx < total) {
                    int hi = ql - 1;  // the segment with s_pre[seg] <= idx < s_pre[seg + 1]; idx grows with u
                    while (seg < hi) {
                        const int mid = (seg + hi + 1) >> 1;
                        if (s_pre[mid] <= idx) seg = mid; else hi = mid - 1;
                    }
                    p[u] = post[s_beg[seg] + (idx - s_pre[seg])];
                }
            }
#pragma unroll
            for (int u = 0; u < kPostUnroll; ++u) {
                if (p[u] == 0xFFFFFFFFu) continue;
                const unsigned shift = 8u * (p[u] & 3u);
                const unsigned old = atomicAdd(&s_count[p[u] >> 2], 1u << shift);
                if (static_cast<int>((old >> shift) & 0xFFu) + 1 == need) {
                    const int at = atomicAdd(&s_n_list, 1);
                    if (at < kPostListCap) s_list[at] = static_cast<unsigned short>(p[u]);
                }
            }
        }
        __syncthreads();
        const int n_list = s_n_list;
        const bool every = n_list > kPostListCap;
        const int n_check = every ? kPostTile : n_list;
        const long long tile_base = static_cast<long long>(tile) << kPostTileBits;
        for (int i = tid; i < n_check; i += blockDim.x) {
            const unsigned p = every ? static_cast<unsigned>(i) : static_cast<unsigned>(s_list[i]);
            const int c = static_cast<int>((s_count[p >> 2] >> (8u * (p & 3u))) & 0xFFu);
            if (c < need) continue;
            const long long pos = tile_base + p;
            if (pos >= limit) continue;
            const unsigned long long code = encode_candidate(score, scale, c, ql, len_by_pos[pos], static_cast<int>(pos));
            const long long key = static_cast<long long>(code >> 32);
            if (key > bound || (key == bound && pos <= last)) {
                const int at = atomicAdd(&cand_count[q], 1);
                if (at < cand_cap[q]) cand[cand_base[q] + at] = code;
            }
        }
        __syncthreads();  // the counters and the list are reset for the next tile
    }
}

// Postings entries each query would read (ScanCount over all its ids): the cost model's input.
__global__ void postings_cost(const long long* __restrict__ qoff, const unsigned short* __restrict__ qtok, int n_queries,
                              const long long* __restrict__ freq_by_id, long long* __restrict__ entries) {
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= n_queries) return;
    long long sum = 0;
    for (long long i = qoff[q]; i < qoff[q + 1]; ++i) sum += freq_by_id[qtok[i]];
    entries[q] = sum;
}

}  // namespace settopk
