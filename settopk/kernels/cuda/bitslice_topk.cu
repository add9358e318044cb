// Exact top-k set-similarity search with bit-sliced counters: the CUDA half of
// settopk/kernels/cuda/index.py, which drives it (settopk/kernels/cuda/modules.py compiles it
// with NVRTC). The scores, least overlaps and the candidate encoding are in
// common.cuh, shared with postings_topk.cu.
//
// Doc layout (built by build_layout):
//   * Docs are sorted by (length, position) into "slots"; slot_len[s] and
//     slot_pos[s] give each slot's length and original position (position
//     order is doc id order). Lengths ascend with the slot.
//   * Slots come in chunks of 32 (one warp). A chunk stores
//     ceil(longest length in the chunk / 8) groups of 8 uint16 ids; group g of
//     slot s is the uint4 at chunk_start[s / 32] + 32 * g + s % 32, so the 32
//     lanes of a warp load 512 contiguous bytes. Since lengths are sorted, a
//     chunk wastes almost nothing on padding (padding ids are 0 and masked).
//     A doc's ids are stored in a bank-spreading order (build_layout).
//
// Counting (count_emit), "positional population count" (Klarqvist, Mula,
// Lemire, 2021) over a vocabulary lookup table:
//   * A block serves one group of 32 queries (16 when the table would not fit
//     in shared memory as 32-bit words). Its table holds one word per token id
//     whose bit j says whether query j holds that id, so a doc token costs one
//     shared-memory load for all the group's queries.
//   * A thread scores one doc at a time. Its 32 overlaps are kept bit-sliced:
//     bit j of plane b is bit b of query j's overlap. Words are added with
//     carry-save adders in the Harley-Seal pattern (Mula, Kurz, Lemire, 2018):
//     16 words cost 15 adders (2 three-input logic ops each, LOP3) and one
//     ripple into the high planes, instead of 16 x 32 popcounts.
//   * Sets of up to 255 ids take 8 planes and uint8 threshold tables; up to 4096,
//     13 planes (Planes<13>) and uint16 tables, whose threshold planes are kept
//     for a window of doc lengths at a time (4097 lengths would not fit in
//     shared memory).
//
// Fused thresholds (no score matrix is ever written):
//   * Each query q has a bound, a (key T, position P) pair (key descending,
//     position ascending). A doc belongs to the candidates when (key > T) or
//     (key == T and position <= P). The bound starts at (-1, -1), every doc,
//     or with a score floor F at (F, 2**31 - 1), exactly the docs with
//     key >= F; it only moves to the k-th best of candidates already emitted,
//     so it is never better than the true k-th best of those eligible docs
//     (see settopk/kernels/cuda/index.py).
//   * key > T and key >= T are turned into least overlaps per doc length by the
//     host-side math of kernels.min_overlap_above (need_overlap, common.cuh); the
//     block stores them bit-sliced per length and compares all 32 counters with
//     16 LOP3s (a bit-sliced borrow chain).
//   * The same tables give the size filter: a (query, length) pair whose least
//     overlap exceeds min(|q|, length) can never qualify; a tile of docs whose
//     lengths are all out of reach for the whole group is skipped before the
//     table is even built, and a warp whose docs are all out of reach skips
//     them.
//   * Candidates go to per-query buffers; a counter per query counts every
//     emission, also past the buffer's capacity, so the host sees overflows.
//
// select_topk sorts each query's candidates (bitonic sort in shared memory),
// writes its best k, and derives the next bound and threshold tables from the
// k-th best candidate (settopk/kernels/cuda/index.py describes the sampling levels).

#include "common.cuh"

namespace settopk {

constexpr int kChunkSlots = 32;    // slots per layout chunk (a warp)
constexpr int kIdsPerGroup = 8;    // uint16 ids per uint4
constexpr unsigned kFullMask = 0xFFFFFFFFu;
constexpr int kSpreadMaxLen = 255; // positions build_layout spreads at once (byte cursors)

// Counter planes: 8 count overlaps up to 255 (max_len <= 255) with uint8 threshold tables; 13
// count up to 8191 (max_len <= 4096) with uint16 tables. kNever: the clamped least overlap
// that no counter reaches (need_overlap's `never`).
template <int kPlanes> struct Planes;
template <> struct Planes<8> {
    using Thr = unsigned char;
    static constexpr int kNever = kNeverLen;
};
template <> struct Planes<13> {
    using Thr = unsigned short;
    static constexpr int kNever = (1 << 13) - 1;
};

// Slot of sample index i at a level that keeps every `stride`-th chunk of 32
// slots: whole chunks keep the warp's loads contiguous and the sampled bytes
// few (a sample of single slots would touch every cache line of the layout).
__device__ __forceinline__ long long sample_slot(long long i, long long stride) {
    return (i >> 5) * stride * kChunkSlots + (i & (kChunkSlots - 1));
}

// Carry-save adder: a + b + c == low + 2 * high, bit by bit.
__device__ __forceinline__ void csa(unsigned& high, unsigned& low, unsigned a, unsigned b, unsigned c) {
    const unsigned u = a ^ b;
    high = (a & b) | (u & c);
    low = u ^ c;
}

// Add 8 membership words into the three low bit-sliced counter planes
// (count == ones + 2 twos + 4 fours + 8 * eights_out): 7 adders.
__device__ __forceinline__ void add8(const unsigned (&w)[8], unsigned& ones, unsigned& twos, unsigned& fours,
                                     unsigned& eights_out) {
    unsigned twos_a, twos_b, fours_a, fours_b;
    csa(twos_a, ones, ones, w[0], w[1]);
    csa(twos_b, ones, ones, w[2], w[3]);
    csa(fours_a, twos, twos, twos_a, twos_b);
    csa(twos_a, ones, ones, w[4], w[5]);
    csa(twos_b, ones, ones, w[6], w[7]);
    csa(fours_b, twos, twos, twos_a, twos_b);
    csa(eights_out, fours, fours, fours_a, fours_b);
}

// Ripple a carry word into planes high[0..kHigh) (a one-bit add per counter).
template <int kHigh>
__device__ __forceinline__ void ripple(unsigned carry, unsigned (&high)[kHigh]) {
#pragma unroll
    for (int b = 0; b < kHigh; ++b) {
        const unsigned t = high[b] & carry;
        high[b] ^= carry;
        carry = t;
    }
}

// Bit j of the result is set when counter j >= threshold j (all bit-sliced):
// no borrow out of counter - threshold. borrow' = maj(~c, t, borrow): one LOP3.
template <int kPlanes>
__device__ __forceinline__ unsigned at_least(const unsigned (&c)[kPlanes], const unsigned* t) {
    unsigned borrow = ~c[0] & t[0];
#pragma unroll
    for (int b = 1; b < kPlanes; ++b) {
        borrow = (~c[b] & t[b]) | ((~c[b] | t[b]) & borrow);
    }
    return ~borrow;
}

// The table words of the 8 ids of `v` (kIdsPerGroup uint16 ids); ids at or past `keep` (the doc's
// ids left from this group on) are padding and give 0.
template <typename Word>
__device__ __forceinline__ void lookup8(const Word* table, const uint4 v, int keep, unsigned (&w)[8]) {
    w[0] = table[v.x & 0xFFFFu];
    w[1] = table[v.x >> 16];
    w[2] = table[v.y & 0xFFFFu];
    w[3] = table[v.y >> 16];
    w[4] = table[v.z & 0xFFFFu];
    w[5] = table[v.z >> 16];
    w[6] = table[v.w & 0xFFFFu];
    w[7] = table[v.w >> 16];
    if (keep < kIdsPerGroup) {  // the doc's last group
#pragma unroll
        for (int e = 1; e < kIdsPerGroup; ++e) {
            if (e >= keep) w[e] = 0u;
        }
    }
}

// ---------------------------------------------------------------------------
// Layout

// The ids of the doc in `slot` (its position slot_pos[slot] in `offsets`): sets `src` to the
// first and returns their count; 0, with `src` left as it is, for a padding slot (>= n_docs).
template <typename Id>
__device__ __forceinline__ int slot_ids(const long long* __restrict__ offsets, const Id* __restrict__ tokens,
                                        const int* __restrict__ slot_pos, long long slot, long long n_docs,
                                        const Id*& src) {
    if (slot >= n_docs) return 0;
    const int pos = slot_pos[slot];
    src = tokens + offsets[pos];
    return static_cast<int>(offsets[pos + 1] - offsets[pos]);
}

// Fill the chunked layout, one warp per chunk (lane l holds slot 32 c + l),
// placing each doc's ids in an order that spreads the warp's shared-memory
// accesses over the 32 banks. The count kernel's lanes read position p of
// their docs together, and the table word of id t sits in bank t % 32, so a
// position whose 32 ids fall in few banks costs several shared-memory
// wavefronts. Counting does not depend on the order of a doc's ids, so each
// position is filled greedily, lane after lane: a lane takes an id from a bank
// no earlier lane took at this position (preferring banks it holds two or
// more ids of, to keep choices for later positions), else any id it has left.
// On random ids this halves the wavefronts per position (about 3.5 -> 2 for
// 65 ids per doc).
//
// Dynamic shared memory: per warp, 32 lanes x stride ids (stride >= the
// longest doc, or kSpreadMaxLen) and 32 x 32 bank cursors (begin, end). Every
// element of every chunk is written; padding ids past a doc's end are 0 (the
// count kernel masks them). The cursors are bytes, so a doc longer than
// kSpreadMaxLen ids is spread in segments of kSpreadMaxLen positions, each
// taking the next kSpreadMaxLen of its ids (on the NETFLIX shape, two thirds
// of the ids lie in such docs).
constexpr int kBuildWarps = 4;

//
// Id is unsigned short (ids below 65536) or unsigned int (wide ids, below 2**24): a wide layout
// keeps each id's low 16 bits in `out` as above and its bits 16..23 in `high`, one byte per id:
// byte p % 8 of the uint2 at the same element index as the uint4 of position p (remap_layout
// turns the pair into a plain layout of a batch's dense ids). `high` is unused for unsigned short.
template <typename Id>
__global__ void __launch_bounds__(kBuildWarps * 32)
build_layout(const long long* __restrict__ offsets, const Id* __restrict__ tokens,
             const int* __restrict__ slot_pos, const long long* __restrict__ chunk_start,
             const int* __restrict__ chunk_groups, long long n_chunks, long long n_docs, int stride,
             uint4* __restrict__ out, uint2* __restrict__ high) {
    extern __shared__ __align__(16) unsigned char s_build_raw[];
    Id* s_build = reinterpret_cast<Id*>(s_build_raw);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    Id* ids = s_build + (static_cast<long long>(warp) * 32 + lane) * stride;
    unsigned char* cursors = reinterpret_cast<unsigned char*>(s_build + kBuildWarps * 32 * stride) +
                             (warp * 32 + lane) * 64;  // [0, 32): next free (pops from the top), [32, 64): begin
    for (long long c = static_cast<long long>(blockIdx.x) * kBuildWarps + warp; c < n_chunks;
         c += static_cast<long long>(gridDim.x) * kBuildWarps) {
        const int n_positions = chunk_groups[c] * kIdsPerGroup;
        const long long slot = c * 32 + lane;
        const Id* src = tokens;
        const int len = slot_ids(offsets, tokens, slot_pos, slot, n_docs, src);
        unsigned packed[4] = {0u, 0u, 0u, 0u};
        unsigned packed_high[2] = {0u, 0u};
        // Segments of kSpreadMaxLen positions, each spread over the banks on its own: the lane's
        // ids at those positions are its ids src[seg0, seg0 + kSpreadMaxLen).
        for (int seg0 = 0; seg0 < n_positions; seg0 += kSpreadMaxLen) {
            const int seg_len = max(0, min(len - seg0, kSpreadMaxLen));
            const Id* seg = src + seg0;
            // Bucket the segment's ids by bank (counting sort into ids[]).
            unsigned char* top = cursors;
            unsigned char* begin = cursors + 32;
            for (int b = 0; b < 32; ++b) top[b] = 0;
            for (int t = 0; t < seg_len; ++t) ++top[seg[t] & 31u];
            unsigned avail = 0u, many = 0u;
            int sum = 0;
            for (int b = 0; b < 32; ++b) {
                const int count = top[b];
                avail |= (count > 0 ? 1u : 0u) << b;
                many |= (count > 1 ? 1u : 0u) << b;
                begin[b] = static_cast<unsigned char>(sum);
                top[b] = static_cast<unsigned char>(sum);
                sum += count;
            }
            for (int t = 0; t < seg_len; ++t) {
                const unsigned id = seg[t];
                ids[top[id & 31u]++] = static_cast<Id>(id);
            }
            // Positions, lane after lane; `used` holds the banks taken at this position.
            const int seg_end = min(n_positions, seg0 + kSpreadMaxLen);
            for (int p = seg0; p < seg_end; ++p) {
                unsigned used = 0u;
                unsigned mine = 0u;  // this lane's id at position p (0: padding)
                for (int j = 0; j < 32; ++j) {
                    if (lane == j && p - seg0 < seg_len) {
                        const unsigned free = avail & ~used;
                        unsigned m = free & many;
                        if (!m) m = free;
                        if (!m) m = avail & many;
                        if (!m) m = avail;
                        const int rot = (lane + p) & 31;  // start the search at a lane-specific bank
                        const unsigned r = __funnelshift_r(m, m, rot);
                        const int b = (__ffs(r) - 1 + rot) & 31;
                        const int at = --top[b];
                        mine = ids[at];
                        const int left = at - begin[b];
                        if (left == 0) avail &= ~(1u << b);
                        if (left < 2) many &= ~(1u << b);
                        used |= 1u << b;
                    }
                    used = __shfl_sync(kFullMask, used, j);
                }
                packed[(p & 7) >> 1] |= (mine & 0xFFFFu) << (16 * (p & 1));
                if (sizeof(Id) == 4) packed_high[(p & 7) >> 2] |= ((mine >> 16) & 0xFFu) << (8 * (p & 3));
                if ((p & 7) == 7) {
                    const long long at = chunk_start[c] + static_cast<long long>(p >> 3) * kChunkSlots + lane;
                    out[at] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
                    if (sizeof(Id) == 4) high[at] = make_uint2(packed_high[0], packed_high[1]);
                    packed[0] = packed[1] = packed[2] = packed[3] = 0u;
                    packed_high[0] = packed_high[1] = 0u;
                }
            }
        }
        __syncwarp();
    }
}

// A batch's plain layout from a wide one: element i of `out` holds the 8 ids of low[i] and
// high[i] (id = low | high << 16), each replaced by dense[id], the id's dense number in the
// batch (0 for an id no query of the batch holds, whose table word is 0). The count kernel then
// runs on `out` as on any plain layout; padding ids map to some number too, and it masks them.
// One thread per element: 24 bytes read and 16 written, plus 8 gathers from `dense`.
__global__ void remap_layout(const uint4* __restrict__ low, const uint2* __restrict__ high, long long n,
                             const unsigned short* __restrict__ dense, uint4* __restrict__ out) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const uint4 v = low[i];
        const uint2 h = high[i];
        const unsigned lo[4] = {v.x, v.y, v.z, v.w};
        const unsigned hi[2] = {h.x, h.y};
        unsigned w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const unsigned a = (lo[e] & 0xFFFFu) | (((hi[e >> 1] >> (16 * (e & 1))) & 0xFFu) << 16);
            const unsigned b = (lo[e] >> 16) | (((hi[e >> 1] >> (16 * (e & 1) + 8)) & 0xFFu) << 16);
            w[e] = static_cast<unsigned>(__ldg(dense + a)) | (static_cast<unsigned>(__ldg(dense + b)) << 16);
        }
        out[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

// The tiled postings (postings_topk.cu's layout) of some ids, from a wide layout
// (settopk/kernels/cuda/wide.py): id p < slot_len[s] of slot s, numbered d = dense[id] != 0,
// is an entry of segment d * n_tiles + slot_pos[s] / kPostTile. With `fill` 0, counts[segment] += 1
// per entry; with `fill` 1, cursor[segment] starting at the segment's start in `post` (the counts'
// exclusive sums), each entry takes the place its cursor points to (one atomicAdd, which returns
// it) and writes its position inside the tile there. Cursor: unsigned int where `post` holds fewer
// than 2**32 entries (half the bytes the atomics touch), else unsigned long long. A shard that keeps
// its counts per (id, tile) runs the fill alone. The order inside a segment is arbitrary:
// ScanCount's counters do not depend on it.
//
// Most of the layout's ids are not numbered, so each is first tested against `filter`, a Bloom
// filter of the numbered ids in shared memory (bits filter_bit(id, 0) and filter_bit(id, 1) set
// for each; the first is exact below 2**20 ids), and only those that pass read dense[id] (up to
// 64 MiB, gathered). One warp per chunk, lane l reads slot 32 c + l,
// kGroupsInFlight groups of 8 ids at a time (a pass is bound by the latency of these loads).
// Dynamic shared memory: the filter, kFilterWords words.
constexpr int kFilterBits = 20;
constexpr int kFilterWords = 1 << (kFilterBits - 5);  // 128 KiB
constexpr int kLayoutPostingsThreads = 1024;          // one block per SM
constexpr int kGroupsInFlight = 4;                    // loads a lane issues before it reads the first

// Bit `which` (0 or 1) of id's pair in layout_postings' filter: its low bits, then a multiplicative
// hash of it (wide.py's WidePostings sets the same bits).
__device__ __forceinline__ unsigned filter_bit(unsigned id, int which) {
    return which == 0 ? id & ((1u << kFilterBits) - 1u) : (id * 2654435761u) >> (32 - kFilterBits);
}

template <typename Cursor>
__global__ void __launch_bounds__(kLayoutPostingsThreads, 1)
layout_postings(const uint4* __restrict__ low, const uint2* __restrict__ high,
                const long long* __restrict__ chunk_start, const unsigned short* __restrict__ slot_len,
                const int* __restrict__ slot_pos, long long n_chunks, long long n_docs,
                const unsigned* __restrict__ filter, const unsigned* __restrict__ dense, int n_tiles,
                int* __restrict__ counts, Cursor* __restrict__ cursor,
                unsigned short* __restrict__ post, int fill) {
    extern __shared__ unsigned s_filter[];
    for (int i = threadIdx.x; i < kFilterWords; i += blockDim.x) s_filter[i] = filter[i];
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const long long warps = static_cast<long long>(gridDim.x) * (blockDim.x >> 5);
    for (long long c = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; c < n_chunks;
         c += warps) {
        const long long slot = c * kChunkSlots + lane;
        const int len = slot < n_docs ? slot_len[slot] : 0;
        const int pos = slot < n_docs ? slot_pos[slot] : 0;
        const long long tile = pos >> kPostTileBits;
        const unsigned short in_tile = static_cast<unsigned short>(pos & (kPostTile - 1));
        const long long base = chunk_start[c] + lane;
        const int n_groups = (len + kIdsPerGroup - 1) / kIdsPerGroup;
        for (int g0 = 0; g0 < n_groups; g0 += kGroupsInFlight) {
            uint4 v[kGroupsInFlight];
            uint2 h[kGroupsInFlight];
#pragma unroll
            for (int u = 0; u < kGroupsInFlight; ++u) {
                const bool in = g0 + u < n_groups;
                const long long at = base + static_cast<long long>(g0 + u) * kChunkSlots;
                v[u] = in ? low[at] : make_uint4(0u, 0u, 0u, 0u);
                h[u] = in ? high[at] : make_uint2(0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < kGroupsInFlight; ++u) {
                const unsigned lo[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
                const unsigned hi[2] = {h[u].x, h[u].y};
                // A group's gathers, then its atomics, then its stores, each step's loads issued
                // together: an entry waits on its own gather and atomic, not on the entries before it.
                unsigned d[kIdsPerGroup];
#pragma unroll
                for (int e = 0; e < kIdsPerGroup; ++e) {
                    // build_layout's packing: low half-word e % 2 of lo[e / 2], high byte e % 4 of hi[e / 4].
                    const unsigned id = ((lo[e >> 1] >> (16 * (e & 1))) & 0xFFFFu) |
                                        (((hi[e >> 2] >> (8 * (e & 3))) & 0xFFu) << 16);
                    const unsigned b0 = filter_bit(id, 0), b1 = filter_bit(id, 1);
                    const bool maybe = (g0 + u) * kIdsPerGroup + e < len &&
                                       ((s_filter[b0 >> 5] >> (b0 & 31u)) & (s_filter[b1 >> 5] >> (b1 & 31u)) & 1u);
                    d[e] = maybe ? dense[id] : 0u;
                }
                Cursor place[kIdsPerGroup];
#pragma unroll
                for (int e = 0; e < kIdsPerGroup; ++e) {
                    const long long seg = static_cast<long long>(d[e]) * n_tiles + tile;
                    if (d[e] != 0u && !fill) atomicAdd(&counts[seg], 1);
                    if (d[e] != 0u && fill) place[e] = atomicAdd(&cursor[seg], Cursor(1));
                }
                if (fill) {
#pragma unroll
                    for (int e = 0; e < kIdsPerGroup; ++e)
                        if (d[e] != 0u) post[place[e]] = in_tile;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Counting with fused thresholds

// Score the docs of one sampling level for one query group and emit candidates.
//
// Grid: x = query group (kQueries consecutive entries of group_query, -1 =
// unused slot), y = tile: sample indices [tile_start[y], tile_start[y + 1]), cut by the
// host where the tiles hold equal work (ids), not equal docs. Sample index i is slot
// sample_slot(i, stride) (every stride-th chunk), for i in [0, n_sample). x
// varies fastest, so the blocks that run together read the same tile and share
// it through L2.
//
// Per query q (rows of the query arrays): its ids qtok[qoff[q] : qoff[q] + qlen[q]]
// (qoff holds each row's start, so the rows may be any order of a CSR batch),
// thr_ge/thr_gt[q * (max_doc_len + 1) + len] least overlaps for key >= T and
// key > T (Planes<kPlanes>::kNever when out of reach), tie_pos[q] = P. Emission of doc d to
// q: cand[cand_base[q] + cand_count[q]++] when below cand_cap[q].
//
// Dynamic shared memory: the table (n_words words of Word, padded to 16
// bytes), then 2 * kPlanes * n_win threshold planes and n_win reach masks, all
// 32-bit, for a window of n_win doc lengths. The tile's lengths are taken one
// window at a time (one window when n_win covers the shard's lengths, as with
// 8 planes; long docs may need several), each window's docs being a run of the
// tile's sample indices, as lengths ascend with the slot.
// kAnyScore: false compiles the Braun-Blanquet kernel alone (the score argument unused), whose
// emission keeps 32-bit math and registers (8 planes only: S * overlap < 2**32 needs
// max_len <= 255); true takes the score at run time. The default score gets an instance of its
// own because a run-time score in its emission slowed the whole search.
template <int kQueries, typename Word, bool kAnyScore, int kPlanes>
__global__ void __launch_bounds__(1024, 1)
count_emit(const uint4* __restrict__ groups, const long long* __restrict__ chunk_start,
           const unsigned short* __restrict__ slot_len, const int* __restrict__ slot_pos,
           long long n_sample, long long stride, const long long* __restrict__ tile_start,
           const int* __restrict__ group_query, const long long* __restrict__ qoff,
           const unsigned short* __restrict__ qtok, const int* __restrict__ qlen,
           const typename Planes<kPlanes>::Thr* __restrict__ thr_ge,
           const typename Planes<kPlanes>::Thr* __restrict__ thr_gt,
           const int* __restrict__ tie_pos, int max_doc_len, int n_win, int n_words, long long scale, int score,
           const int* __restrict__ cosine_keys, int* __restrict__ cand_count, const long long* __restrict__ cand_base,
           const int* __restrict__ cand_cap, unsigned long long* __restrict__ cand) {
    static_assert(kAnyScore || kPlanes == 8, "the 32-bit Braun-Blanquet emission needs max_len <= 255");
    constexpr int kHigh = kPlanes - 4;  // planes above ones, twos, fours and eights
    constexpr int kNever = Planes<kPlanes>::kNever;
    extern __shared__ uint4 smem[];
    __shared__ int s_query[32];
    __shared__ int s_qlen[32];
    __shared__ int s_tie[32];
    __shared__ long long s_run[2];  // the window's sample indices [s_run[0], s_run[1])

    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int n_warps = blockDim.x >> 5;
    const int n_len = max_doc_len + 1;
    const int table_vectors = (n_words * static_cast<int>(sizeof(Word)) + 15) / 16;
    unsigned* ge_planes = reinterpret_cast<unsigned*>(smem + table_vectors);
    unsigned* gt_planes = ge_planes + kPlanes * n_win;
    unsigned* reach = gt_planes + kPlanes * n_win;

    const long long i0 = tile_start[blockIdx.y];
    const long long i1 = min(n_sample, tile_start[blockIdx.y + 1]);
    if (i0 >= i1) return;
    if (threadIdx.x < 32) {
        const int q = lane < kQueries ? group_query[static_cast<long long>(blockIdx.x) * kQueries + lane] : -1;
        s_query[lane] = q;
        s_qlen[lane] = q >= 0 ? qlen[q] : 0;
        s_tie[lane] = q >= 0 ? tie_pos[q] : -1;
    }
    // Lengths ascend with the slot: the tile's lie in [lo, hi].
    const int lo = slot_len[sample_slot(i0, stride)];
    const int hi = slot_len[sample_slot(i1 - 1, stride)];
    bool table_ready = false;
    for (int w0 = lo; w0 <= hi; w0 += n_win) {
        const int w1 = min(hi, w0 + n_win - 1);
        __syncthreads();  // the previous window's planes are no longer read
        // Threshold planes of the window's lengths: lane j of each warp holds query j's values.
        {
            const int q = s_query[lane];
            const int query_len = s_qlen[lane];
            for (int len = w0 + warp; len <= w1; len += n_warps) {
                int ge = kNever, gt = kNever;
                if (q >= 0) {
                    ge = thr_ge[static_cast<long long>(q) * n_len + len];
                    gt = thr_gt[static_cast<long long>(q) * n_len + len];
                }
                const unsigned r = __ballot_sync(kFullMask, q >= 0 && ge <= min(query_len, len));
#pragma unroll
                for (int b = 0; b < kPlanes; ++b) {
                    const unsigned pg = __ballot_sync(kFullMask, (ge >> b) & 1);
                    const unsigned pt = __ballot_sync(kFullMask, (gt >> b) & 1);
                    if (lane == 0) {
                        ge_planes[(len - w0) * kPlanes + b] = pg;
                        gt_planes[(len - w0) * kPlanes + b] = pt;
                    }
                }
                if (lane == 0) reach[len - w0] = r;
            }
        }
        // The window's run of sample indices: the first with length >= w0 and the first > w1.
        if (threadIdx.x < 2) {
            const int want = threadIdx.x == 0 ? w0 : w1 + 1;
            long long a = i0, b = i1;
            if (want > lo) {
                while (a < b) {
                    const long long m = (a + b) >> 1;
                    if (slot_len[sample_slot(m, stride)] < want) a = m + 1;
                    else b = m;
                }
            }
            s_run[threadIdx.x] = a;
        }
        __syncthreads();
        // Size filter for the whole window: no (query, length) pair within reach, nothing to count.
        {
            int any = 0;
            for (int len = threadIdx.x; len <= w1 - w0; len += blockDim.x) any |= reach[len] != 0u;
            if (!__syncthreads_or(any)) continue;
        }

        if (!table_ready) {  // the membership table, built once per block: zero it, then set each query's bits
            table_ready = true;
            for (int v = threadIdx.x; v < table_vectors; v += blockDim.x) smem[v] = make_uint4(0u, 0u, 0u, 0u);
            __syncthreads();
            unsigned* words = reinterpret_cast<unsigned*>(smem);
            for (int j = 0; j < kQueries; ++j) {
                const int q = s_query[j];
                if (q < 0) continue;
                const long long end = qoff[q] + s_qlen[j];
                for (long long t = qoff[q] + threadIdx.x; t < end; t += blockDim.x) {
                    const unsigned id = qtok[t];
                    if (id >= static_cast<unsigned>(n_words)) continue;  // in no doc of the shard
                    if (sizeof(Word) == 4) {
                        atomicOr(&words[id], 1u << j);
                    } else {  // 16-bit words, little-endian halves of a 32-bit word
                        atomicOr(&words[id >> 1], 1u << (j + 16 * (id & 1u)));
                    }
                }
            }
            __syncthreads();
        }
        const Word* table = reinterpret_cast<const Word*>(smem);
        const long long r0 = s_run[0], r1 = s_run[1];

        for (long long base = r0 + static_cast<long long>(warp) * 32; base < r1;
             base += static_cast<long long>(n_warps) * 32) {
            const long long i = base + lane;
            const bool active = i < r1;
            const long long slot = active ? sample_slot(i, stride) : 0;
            const int len = active ? slot_len[slot] : 0;
            const bool live = active && reach[len - w0] != 0u;
            if (!__any_sync(kFullMask, live)) continue;

            const int n_groups = live ? (len + kIdsPerGroup - 1) / kIdsPerGroup : 0;
            const uint4* p = groups + chunk_start[slot / kChunkSlots] + (slot & (kChunkSlots - 1));
            // Groups in pairs: each adds 8 words into ones, twos and fours (add8), the pair's two
            // carries go into `eights` with one more adder, and only its carry ripples into the
            // kPlanes - 4 high planes (Harley-Seal over 16 words: half the ripples of 8 at a time).
            unsigned ones = 0u, twos = 0u, fours = 0u, eights = 0u;
            unsigned high[kHigh];
#pragma unroll
            for (int b = 0; b < kHigh; ++b) high[b] = 0u;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (n_groups > 0) v = __ldg(p);
            for (int g = 0; g < n_groups; g += 2) {
                const bool pair = g + 1 < n_groups;
                uint4 second = make_uint4(0u, 0u, 0u, 0u), next = make_uint4(0u, 0u, 0u, 0u);
                if (pair) second = __ldg(p + static_cast<long long>(g + 1) * kChunkSlots);
                if (g + 2 < n_groups) next = __ldg(p + static_cast<long long>(g + 2) * kChunkSlots);
                unsigned w[8], eights_a, eights_b = 0u;
                lookup8(table, v, len - g * kIdsPerGroup, w);
                add8(w, ones, twos, fours, eights_a);
                if (pair) {
                    lookup8(table, second, len - (g + 1) * kIdsPerGroup, w);
                    add8(w, ones, twos, fours, eights_b);
                }
                unsigned sixteens;
                csa(sixteens, eights, eights, eights_a, eights_b);
                ripple<kHigh>(sixteens, high);
                v = next;
            }
            if (!live) continue;

            unsigned c[kPlanes];
            c[0] = ones;
            c[1] = twos;
            c[2] = fours;
            c[3] = eights;
#pragma unroll
            for (int b = 0; b < kHigh; ++b) c[4 + b] = high[b];
            const unsigned above = at_least<kPlanes>(c, gt_planes + (len - w0) * kPlanes);         // key > T
            unsigned tie = at_least<kPlanes>(c, ge_planes + (len - w0) * kPlanes) & ~above;        // key == T
            unsigned emit = above;
            if ((emit | tie) == 0u) continue;
            const int pos = slot_pos[slot];
            while (tie) {
                const int j = __ffs(tie) - 1;
                tie &= tie - 1;
                if (pos <= s_tie[j]) emit |= 1u << j;
            }
            while (emit) {
                const int j = __ffs(emit) - 1;
                emit &= emit - 1;
                const int q = s_query[j];
                int overlap = 0;
#pragma unroll
                for (int b = 0; b < kPlanes; ++b) overlap |= static_cast<int>((c[b] >> j) & 1u) << b;
                const int at = atomicAdd(&cand_count[q], 1);
                if (at < cand_cap[q]) {
                    cand[cand_base[q] + at] =
                        kAnyScore ? encode_candidate(score, scale, cosine_keys, overlap, s_qlen[j], len, pos)
                                  : encode_braun_blanquet(static_cast<unsigned>(scale), overlap, s_qlen[j], len, pos);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Selection and the next bound

// One block per row: sort the row's candidates (bitonic, descending, in
// shared memory of sort_size >= 2 entries, a power of two, of which the row
// uses the least power of two >= its count) and write its best
// k to top[q * k ...] (0 where fewer). Rows whose kept candidates exceed
// sort_size are left alone (the host sorts them).
//
// With update != 0, also move the query's bound to its k-th best kept
// candidate when it kept at least k (any subset of the docs gives a lower
// bound on the k-th best; kept candidates already clear the bound, so it
// never drops, in particular never below a score floor), and rewrite its
// threshold tables for the next level: thr_ge = least overlap for key >= T,
// thr_gt for key > T, by length (the tables of count_emit<..., kPlanes>).
template <int kPlanes>
__global__ void select_topk(const unsigned long long* __restrict__ cand, const long long* __restrict__ cand_base,
                            const int* __restrict__ cand_cap, const int* __restrict__ cand_count,
                            const int* __restrict__ rows, int k, int sort_size,
                            unsigned long long* __restrict__ top, int update,
                            long long* __restrict__ bound_key, int* __restrict__ tie_pos,
                            const int* __restrict__ qlen, int max_doc_len, long long scale, int max_len, int score,
                            const int* __restrict__ cosine_keys, typename Planes<kPlanes>::Thr* __restrict__ thr_ge,
                            typename Planes<kPlanes>::Thr* __restrict__ thr_gt) {
    using Thr = typename Planes<kPlanes>::Thr;
    constexpr int kNever = Planes<kPlanes>::kNever;
    extern __shared__ unsigned long long s_sort[];
    __shared__ long long s_key;
    const int q = rows[blockIdx.x];
    const int n = min(cand_count[q], cand_cap[q]);
    if (n > sort_size) return;
    int width = 2;  // this row's sort: the least power of two >= n (the work follows the row, not the buffer)
    while (width < n) width <<= 1;
    const unsigned long long* src = cand + cand_base[q];
    for (int i = threadIdx.x; i < width; i += blockDim.x) s_sort[i] = i < n ? src[i] : 0ull;
    __syncthreads();
    for (int size = 2; size <= width; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < width; i += blockDim.x) {
                const int j = i ^ stride;
                if (j > i) {
                    const unsigned long long a = s_sort[i], b = s_sort[j];
                    // Descending overall: runs with (i & size) == 0 descend, the others ascend.
                    const bool swap = ((i & size) == 0) ? (a < b) : (a > b);
                    if (swap) {
                        s_sort[i] = b;
                        s_sort[j] = a;
                    }
                }
            }
            __syncthreads();
        }
    }
    for (int r = threadIdx.x; r < k; r += blockDim.x) top[static_cast<long long>(q) * k + r] = r < n ? s_sort[r] : 0ull;
    if (!update) return;
    if (threadIdx.x == 0) {
        long long key = bound_key[q];
        if (n >= k) {
            const unsigned long long v = s_sort[k - 1];
            key = static_cast<long long>(v >> 32);
            tie_pos[q] = static_cast<int>(~static_cast<unsigned>(v));
            bound_key[q] = key;
        }
        s_key = key;
    }
    __syncthreads();
    const long long key = s_key;
    const int n_len = max_doc_len + 1;
    for (int len = threadIdx.x; len < n_len; len += blockDim.x) {
        thr_ge[static_cast<long long>(q) * n_len + len] =
            static_cast<Thr>(need_overlap(key - 1, qlen[q], len, scale, max_len, score, cosine_keys, kNever));
        thr_gt[static_cast<long long>(q) * n_len + len] =
            static_cast<Thr>(need_overlap(key, qlen[q], len, scale, max_len, score, cosine_keys, kNever));
    }
}

// Decode top-k entries: doc id (-1 for an empty slot), overlap recovered
// exactly from the key, and doc length. For fixed lengths the key is strictly
// increasing in the overlap (different overlaps are different fractions, and
// the key is strictly order-preserving), so the overlap is the least one whose
// key is > key - 1: least_overlap(key - 1) (for Braun-Blanquet
// ceil(key * m / S), m = max(|q|, |d|)); 0 where the key is 0/0's.
// Entry i belongs to the batch's (length-sorted) query i / k, whose output row
// is out_row[i / k], so the host receives its rows in their own order.
__global__ void decode_topk(const unsigned long long* __restrict__ top, long long n_entries, int k,
                            const int* __restrict__ qlen, const int* __restrict__ out_row,
                            const unsigned short* __restrict__ len_by_pos, long long scale, int max_len, int score,
                            const int* __restrict__ cosine_keys, const long long* __restrict__ doc_ids,
                            long long* __restrict__ doc_id, short* __restrict__ overlap,
                            short* __restrict__ doc_len) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n_entries;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const unsigned long long v = top[i];
        const long long q = i / k;
        const long long o = static_cast<long long>(out_row[q]) * k + (i - q * k);
        if (v == 0ull) {
            doc_id[o] = -1;
            overlap[o] = 0;
            doc_len[o] = 0;
            continue;
        }
        const int pos = static_cast<int>(~static_cast<unsigned>(v));
        const long long key = static_cast<long long>(v >> 32);
        const int len = len_by_pos[pos];
        doc_id[o] = doc_ids[pos];
        overlap[o] = static_cast<short>(least_overlap(key - 1, qlen[q], len, scale, max_len, score, cosine_keys));
        doc_len[o] = static_cast<short>(len);
    }
}

}  // namespace settopk
