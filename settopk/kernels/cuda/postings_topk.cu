// Exact candidate emission through an inverted index: the CUDA half of
// settopk/kernels/cuda/postings.py. It includes common.cuh, as bitslice_topk.cu does,
// so encode_candidate and the Score enum are shared and the keys are those of
// the scan.
//
// Layout (built by settopk/kernels/cuda/postings.py): docs are cut into tiles of
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
// of the tile exactly. The bounds of the tile's segments are loaded while the
// previous tile is counted; a warp counts one segment at a time with four
// loads in flight per lane. The kernel is bound by instruction issue and by
// the barriers of each tile, not by memory nor by the atomics
// (docs/kernels.md has the profile and the variants measured).
//
// Emission waits for the block's last tile: a tile's docs with
// counter >= need go to a list in shared memory (kPostPending; past it they
// are emitted at once), so the global loads and atomics of the emission leave
// the per-tile steps; the host gives a block 16 tiles, enough to amortise
// them. A warp reserves its candidates' slots with one atomic.
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

#include "common.cuh"

namespace settopk {

constexpr int kPostListCap = 4096;
constexpr int kPostThreads = 1024;
constexpr int kPostMaxIds = 256;   // max_len <= 255
constexpr int kPostUnroll = 4;     // postings entries in flight per lane
constexpr int kPostPending = 2048; // qualifying docs a block keeps in shared memory before emitting them

// Dynamic shared memory: kPostTile / 4 words of byte counters (64 KiB). Id: the queries' ids,
// unsigned short, or unsigned int for a wide shard's postings (numbered per chunk of queries).
template <typename Id>
__global__ void __launch_bounds__(kPostThreads)
postings_emit(const unsigned short* __restrict__ post, const long long* __restrict__ seg_start, int n_tiles,
              int n_words, long long limit, const int* __restrict__ route, const long long* __restrict__ qoff,
              const Id* __restrict__ qtok, const int* __restrict__ qlen,
              const unsigned char* __restrict__ thr_ge, int max_doc_len, const long long* __restrict__ bound_key,
              const int* __restrict__ tie_pos, const unsigned short* __restrict__ len_by_pos, long long scale,
              int score, const int* __restrict__ cosine_keys, int* __restrict__ cand_count,
              const long long* __restrict__ cand_base, const int* __restrict__ cand_cap,
              unsigned long long* __restrict__ cand) {
    extern __shared__ uint4 s_count4[];
    unsigned* s_count = reinterpret_cast<unsigned*>(s_count4);
    __shared__ unsigned short s_list[kPostListCap];
    __shared__ long long s_beg[kPostMaxIds];  // start in post of the tile's segment of id i
    __shared__ int s_len[kPostMaxIds];        // its length
    __shared__ int s_n_list;
    __shared__ int s_need;
    __shared__ unsigned s_pend_pos[kPostPending];  // docs with overlap >= need, emitted after the last tile
    __shared__ unsigned char s_pend_count[kPostPending];
    __shared__ int s_n_pend;

    const int q = route[blockIdx.x];
    const int ql = qlen[q];
    const int n_len = max_doc_len + 1;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const long long n_tiles_used = (limit + kPostTile - 1) >> kPostTileBits;
    const int warp = tid >> 5;
    const int n_warps = blockDim.x >> 5;
    if (tid == 0) {
        s_need = 255;
        s_n_pend = 0;
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
        const long long t = qtok[qoff[q] + tid];
        if (t < n_words) seg_row = t * n_tiles;  // no doc holds an id above the largest
    }
    long long next_b = 0, next_e = 0;
    int tile = blockIdx.y;
    if (seg_row >= 0 && tile < n_tiles_used) {
        next_b = seg_start[seg_row + tile];
        next_e = seg_start[seg_row + tile + 1];
    }
    const long long bound = bound_key[q];
    const int last = tie_pos[q];
    const long long base_q = cand_base[q];
    const int cap_q = cand_cap[q];
    // Emission of doc pos with overlap c: exact key, compared with the bound; one global atomic per warp.
    auto emit = [&](bool ok, long long pos, int c) {
        unsigned long long code = 0;
        if (ok) {
            code = encode_candidate(score, scale, cosine_keys, c, ql, len_by_pos[pos], static_cast<int>(pos));
            const long long key = static_cast<long long>(code >> 32);
            ok = key > bound || (key == bound && pos <= last);
        }
        const unsigned mask = __ballot_sync(0xFFFFFFFFu, ok);
        if (mask == 0u) return;
        const int leader = __ffs(mask) - 1;
        int first = 0;
        if (lane == leader) first = atomicAdd(&cand_count[q], __popc(mask));
        first = __shfl_sync(0xFFFFFFFFu, first, leader);
        const int at = first + __popc(mask & ((1u << lane) - 1u));
        if (ok && at < cap_q) cand[base_q + at] = code;
    };
    for (; tile < n_tiles_used; tile += gridDim.y) {
        for (int i = tid; i < kPostTile / 16; i += blockDim.x) s_count4[i] = make_uint4(0u, 0u, 0u, 0u);
        if (tid < ql) {
            s_beg[tid] = next_b;
            s_len[tid] = static_cast<int>(next_e - next_b);
            const int after = tile + gridDim.y;
            if (seg_row >= 0 && after < n_tiles_used) {
                next_b = seg_start[seg_row + after];
                next_e = seg_start[seg_row + after + 1];
            }
        }
        if (tid == 0) s_n_list = 0;
        __syncthreads();
        const int need = max(s_need, 1);
        for (int i = warp; i < ql; i += n_warps) {
            const long long b = s_beg[i];
            const int n = s_len[i];
            for (int j0 = lane; j0 < n; j0 += 32 * kPostUnroll) {
                unsigned p[kPostUnroll];
#pragma unroll
                for (int u = 0; u < kPostUnroll; ++u) {
                    const int j = j0 + 32 * u;
                    p[u] = j < n ? static_cast<unsigned>(post[b + j]) : 0xFFFFFFFFu;
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
        }
        __syncthreads();
        const int n_list = s_n_list;
        const bool every = n_list > kPostListCap;
        const int n_check = every ? kPostTile : n_list;
        const long long tile_base = static_cast<long long>(tile) << kPostTileBits;
        for (int i0 = warp * 32; i0 < n_check; i0 += blockDim.x) {  // whole warps, for the ballots
            const int i = i0 + lane;
            int c = 0;
            long long pos = 0;
            if (i < n_check) {
                const unsigned p = every ? static_cast<unsigned>(i) : static_cast<unsigned>(s_list[i]);
                c = static_cast<int>((s_count[p >> 2] >> (8u * (p & 3u))) & 0xFFu);
                pos = tile_base + p;
            }
            bool ok = i < n_check && c >= need && pos < limit;
            if (ok) {
                const int at = atomicAdd(&s_n_pend, 1);
                if (at < kPostPending) {
                    s_pend_pos[at] = static_cast<unsigned>(pos);
                    s_pend_count[at] = static_cast<unsigned char>(c);
                    ok = false;
                }
            }
            emit(ok, pos, c);  // past the pending list: at once
        }
        __syncthreads();  // the counters and the list are reset for the next tile
    }
    const int n_pend = min(s_n_pend, kPostPending);
    for (int i0 = warp * 32; i0 < n_pend; i0 += blockDim.x) {
        const int i = i0 + lane;
        emit(i < n_pend, i < n_pend ? static_cast<long long>(s_pend_pos[i]) : 0,
             i < n_pend ? static_cast<int>(s_pend_count[i]) : 0);
    }
}

// Postings entries each query would read (ScanCount over all its ids): the cost model's input.
__global__ void postings_cost(const long long* __restrict__ qoff, const unsigned short* __restrict__ qtok,
                              const int* __restrict__ qlen, int n_queries,
                              const long long* __restrict__ freq_by_id, long long* __restrict__ entries) {
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= n_queries) return;
    long long sum = 0;
    for (long long i = qoff[q], end = qoff[q] + qlen[q]; i < end; ++i) sum += freq_by_id[qtok[i]];
    entries[q] = sum;
}

}  // namespace settopk
