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
// postings_emit: one block per (routed query, tile). ScanCount (Sarawagi and
// Kirpal, SIGMOD 2004; Li, Lu, Lu, ICDE 2008): the block adds one per
// postings entry of the query's ids into one byte counter per doc of the tile
// (shared memory, four counters per 32-bit word; an overlap never exceeds
// max_len <= 255, so a byte never carries), which gives every nonzero overlap
// of the tile exactly. A doc whose counter reaches need, the least overlap any
// doc length needs for key >= T (the minimum of the query's thr_ge row, at
// least 1), is listed once, when it reaches it; a listed doc is emitted with
// its exact key when it is as good as the bound (key > T, or key == T and
// position <= P), like count_emit's emission, so both paths emit the same set
// of docs with key >= 1. The host routes a query here only when T >= 1, so no
// doc outside the postings (overlap 0, key 0) can qualify. When the list
// overflows, every counter of the tile is checked instead (exact either way).
// Emission counts every candidate past the buffer's capacity, as count_emit.

namespace settopk {

constexpr int kPostTileBits = 16;
constexpr int kPostTile = 1 << kPostTileBits;
constexpr int kPostListCap = 4096;
constexpr int kPostThreads = 512;

// Dynamic shared memory: kPostTile / 4 words of byte counters (64 KiB).
__global__ void __launch_bounds__(kPostThreads)
postings_emit(const unsigned short* __restrict__ post, const long long* __restrict__ seg_start, int n_tiles,
              int n_words, long long n_docs, const int* __restrict__ route, const long long* __restrict__ qoff,
              const unsigned short* __restrict__ qtok, const int* __restrict__ qlen,
              const unsigned char* __restrict__ thr_ge, int max_doc_len, const long long* __restrict__ bound_key,
              const int* __restrict__ tie_pos, const unsigned char* __restrict__ len_by_pos, long long scale,
              int score, int* __restrict__ cand_count, const long long* __restrict__ cand_base,
              const int* __restrict__ cand_cap, unsigned long long* __restrict__ cand) {
    extern __shared__ unsigned s_count[];
    __shared__ unsigned short s_list[kPostListCap];
    __shared__ int s_n_list;
    __shared__ int s_need;

    const int q = route[blockIdx.x];
    const int tile = blockIdx.y;
    const int ql = qlen[q];
    const int n_len = max_doc_len + 1;
    for (int i = threadIdx.x; i < kPostTile / 4; i += blockDim.x) s_count[i] = 0u;
    if (threadIdx.x == 0) {
        int need = 255;
        for (int l = 0; l < n_len; ++l) need = min(need, static_cast<int>(thr_ge[static_cast<long long>(q) * n_len + l]));
        s_need = max(need, 1);
        s_n_list = 0;
    }
    __syncthreads();
    const int need = s_need;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int n_warps = blockDim.x >> 5;
    const long long q0 = qoff[q];
    for (int i = warp; i < ql; i += n_warps) {
        const int t = qtok[q0 + i];
        if (t >= n_words) continue;  // no doc holds an id above the largest doc id
        const long long seg = static_cast<long long>(t) * n_tiles + tile;
        const long long end = seg_start[seg + 1];
        for (long long j = seg_start[seg] + lane; j < end; j += 32) {
            const unsigned p = post[j];
            const unsigned shift = 8u * (p & 3u);
            const unsigned old = atomicAdd(&s_count[p >> 2], 1u << shift);
            if (static_cast<int>((old >> shift) & 0xFFu) + 1 == need) {
                const int at = atomicAdd(&s_n_list, 1);
                if (at < kPostListCap) s_list[at] = static_cast<unsigned short>(p);
            }
        }
    }
    __syncthreads();
    const int n_list = s_n_list;
    const bool every = n_list > kPostListCap;
    const int n_check = every ? kPostTile : n_list;
    const long long bound = bound_key[q];
    const int last = tie_pos[q];
    const long long tile_base = static_cast<long long>(tile) << kPostTileBits;
    for (int i = threadIdx.x; i < n_check; i += blockDim.x) {
        const unsigned p = every ? static_cast<unsigned>(i) : static_cast<unsigned>(s_list[i]);
        const int c = static_cast<int>((s_count[p >> 2] >> (8u * (p & 3u))) & 0xFFu);
        if (c < need) continue;
        const long long pos = tile_base + p;
        if (pos >= n_docs) continue;
        const unsigned long long code = encode_candidate(score, scale, c, ql, len_by_pos[pos], static_cast<int>(pos));
        const long long key = static_cast<long long>(code >> 32);
        if (key > bound || (key == bound && pos <= last)) {
            const int at = atomicAdd(&cand_count[q], 1);
            if (at < cand_cap[q]) cand[cand_base[q] + at] = code;
        }
    }
}

}  // namespace settopk
