// Exact top-k Braun-Blanquet search over token-id sets: the CUDA half of
// kernels/cuda.py (which compiles this file with NVRTC and drives it).
//
// Layout and counting follow the STI2 competition champion's design:
//   * Docs are stored "swizzled": each doc's ids are cut into groups of 8
//     uint16 ids (16 bytes, one uint4 load), and the groups are laid out
//     group-major, element [g][d] at g * n_docs_padded + d. Consecutive threads
//     take consecutive docs, so every uint4 load of a warp is coalesced.
//   * A block scores 4 queries at once. Their bitsets over the vocabulary sit
//     in dynamic shared memory interleaved by word ([word][4] uint32), so one
//     16-byte shared load answers "is this id in query j?" for all 4 queries.
//   * A doc only counts positions < its length: the padding in its last group
//     is never looked at, so every uint16 value stays a valid id.
//
// Top-k selection is not done here: count_and_emit only emits the (doc, key)
// pairs that beat the query's running threshold, and the host merges them
// (see kernels/cuda.py for the chunk / threshold / overflow protocol).
//
// Candidate encoding (unsigned 64-bit, larger is better):
//   (key << 32) | ~position
// key = (scale * overlap) / max(|q|, |d|) (kernels.score_key), position < 2**31.
// Sorting descending gives key descending, then position (= doc id) ascending.
// ~position has its top bit set, so every real candidate is > 0 and 0 can mark
// an empty slot.

namespace settopk {

constexpr int kQueriesPerBlock = 4;  // one uint4 of shared bitset words
constexpr int kIdsPerGroup = 8;      // uint16 ids per uint4 doc group

// Id number e (0..7) of a uint4 group: little-endian, so id 2i is the low half
// of word i and id 2i + 1 the high half.
__device__ __forceinline__ unsigned group_id(const uint4& v, int e) {
    const unsigned word = (e < 2) ? v.x : (e < 4) ? v.y : (e < 6) ? v.z : v.w;
    return (e & 1) ? (word >> 16) : (word & 0xFFFFu);
}

__device__ __forceinline__ unsigned long long encode_candidate(
    long long scale, int overlap, int query_len, int doc_len, int position) {
    const int m = max(query_len, doc_len);
    // 64-bit product: scale (max_len**2) times overlap overflows int32.
    const long long key = (m > 0) ? (scale * overlap) / m : 0;
    return (static_cast<unsigned long long>(key) << 32) |
           static_cast<unsigned>(~position);
}

// Build the swizzled doc layout from CSR. One thread per uint4 element
// [g][d]; elements past a doc's end (and padding docs) are zero.
__global__ void build_doc_groups(const long long* __restrict__ offsets,
                                 const unsigned short* __restrict__ tokens,
                                 int n_docs, long long n_docs_padded, int n_groups,
                                 uint4* __restrict__ out) {
    const long long total = n_docs_padded * n_groups;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
         i < total; i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long g = i / n_docs_padded;
        const long long d = i - g * n_docs_padded;
        unsigned packed[4] = {0u, 0u, 0u, 0u};
        if (d < n_docs) {
            const long long begin = offsets[d] + g * kIdsPerGroup;
            const long long end = offsets[d + 1];
            for (int e = 0; e < kIdsPerGroup; ++e) {
                if (begin + e < end) {
                    packed[e >> 1] |= static_cast<unsigned>(tokens[begin + e]) << (16 * (e & 1));
                }
            }
        }
        out[i] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    }
}

// Set bit `id` of its query's bitset, one thread per query token.
// bits: [n_queries][n_words] uint32, zeroed by the caller; owner[t] = query of token t.
__global__ void build_query_bitsets(const unsigned short* __restrict__ tokens,
                                    const int* __restrict__ owner, long long n_tokens,
                                    int n_words, unsigned* __restrict__ bits) {
    for (long long t = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
         t < n_tokens; t += static_cast<long long>(gridDim.x) * blockDim.x) {
        const unsigned id = tokens[t];
        atomicOr(&bits[static_cast<long long>(owner[t]) * n_words + (id >> 5)], 1u << (id & 31));
    }
}

// Count overlaps of docs [chunk_begin, chunk_end) with 4 queries per block and
// emit the candidates that beat each query's running threshold.
//
// Grid: x = slot group (slots 4x .. 4x+3 of qlist), y = doc tile of
// docs_per_tile docs. x varies fastest, so blocks that run together read the
// same doc tile and share it through L2.
//
// qlist[slot] is the query (row of qbits / qlen / min_ov) scored in that slot,
// or -1 for an unused slot. A doc d is emitted for slot s holding query q when
//   overlap >= min_ov[q * min_ov_stride + len(d)]
// (the table is kernels.min_overlap_above of q's threshold, indexed by doc
// length). cand_count[s] counts every emission, also past cap, so the host
// sees an overflow; only the first cap go to cand[s * cap ...].
__global__ void count_and_emit(const uint4* __restrict__ doc_groups, long long n_docs_padded,
                               const short* __restrict__ doc_len,
                               int chunk_begin, int chunk_end, int docs_per_tile,
                               const unsigned* __restrict__ qbits, int n_words,
                               const int* __restrict__ qlist,
                               const short* __restrict__ qlen,
                               const int* __restrict__ min_ov, int min_ov_stride,
                               long long scale,
                               int* __restrict__ cand_count,
                               unsigned long long* __restrict__ cand, int cap) {
    extern __shared__ uint4 shared_bits[];  // [n_words] x 4 queries
    unsigned* shared_words = reinterpret_cast<unsigned*>(shared_bits);

    const int slot0 = blockIdx.x * kQueriesPerBlock;
    int query[kQueriesPerBlock];
    int query_len[kQueriesPerBlock];
#pragma unroll
    for (int j = 0; j < kQueriesPerBlock; ++j) {
        query[j] = qlist[slot0 + j];
        query_len[j] = query[j] >= 0 ? qlen[query[j]] : 0;
    }

    // Interleave the 4 bitsets word by word; an unused slot gets an empty bitset.
    for (int i = threadIdx.x; i < n_words * kQueriesPerBlock; i += blockDim.x) {
        const int j = i & (kQueriesPerBlock - 1);
        const int w = i / kQueriesPerBlock;
        shared_words[i] = query[j] >= 0 ? qbits[static_cast<long long>(query[j]) * n_words + w] : 0u;
    }
    __syncthreads();

    const long long tile_begin = chunk_begin + static_cast<long long>(blockIdx.y) * docs_per_tile;
    const long long tile_end = min(static_cast<long long>(chunk_end), tile_begin + docs_per_tile);
    for (long long d = tile_begin + threadIdx.x; d < tile_end; d += blockDim.x) {
        const int len = doc_len[d];
        int count[kQueriesPerBlock] = {0, 0, 0, 0};
        for (int g = 0, p = 0; p < len; ++g, p += kIdsPerGroup) {
            const uint4 v = doc_groups[g * n_docs_padded + d];
            const int here = min(kIdsPerGroup, len - p);
#pragma unroll
            for (int e = 0; e < kIdsPerGroup; ++e) {
                if (e < here) {
                    const unsigned id = group_id(v, e);
                    const uint4 word = shared_bits[id >> 5];
                    const unsigned bit = id & 31;
                    count[0] += (word.x >> bit) & 1u;
                    count[1] += (word.y >> bit) & 1u;
                    count[2] += (word.z >> bit) & 1u;
                    count[3] += (word.w >> bit) & 1u;
                }
            }
        }
#pragma unroll
        for (int j = 0; j < kQueriesPerBlock; ++j) {
            if (query[j] < 0) continue;
            if (count[j] < min_ov[static_cast<long long>(query[j]) * min_ov_stride + len]) continue;
            const int slot = slot0 + j;
            const int at = atomicAdd(&cand_count[slot], 1);
            if (at < cap) {
                cand[static_cast<long long>(slot) * cap + at] =
                    encode_candidate(scale, count[j], query_len[j], len, static_cast<int>(d));
            }
        }
    }
}

// Overlap of each final top-k entry, counted again from the doc layout and
// the query's bitset in global memory (the 64-bit candidate holds no overlap).
// vals: [n_rows][k] candidates (0 = empty slot); row r is query r of qbits.
__global__ void recount_overlap(const unsigned long long* __restrict__ vals, int n_rows, int k,
                                const uint4* __restrict__ doc_groups, long long n_docs_padded,
                                const short* __restrict__ doc_len,
                                const unsigned* __restrict__ qbits, int n_words,
                                short* __restrict__ overlap) {
    const long long total = static_cast<long long>(n_rows) * k;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
         i < total; i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const unsigned long long val = vals[i];
        int count = 0;
        if (val != 0ull) {
            const long long d = static_cast<long long>(~static_cast<unsigned>(val));
            const unsigned* bits = qbits + (i / k) * n_words;
            const int len = doc_len[d];
            for (int g = 0, p = 0; p < len; ++g, p += kIdsPerGroup) {
                const uint4 v = doc_groups[g * n_docs_padded + d];
                for (int e = 0; e < kIdsPerGroup && p + e < len; ++e) {
                    const unsigned id = group_id(v, e);
                    count += (bits[id >> 5] >> (id & 31)) & 1u;
                }
            }
        }
        overlap[i] = static_cast<short>(count);
    }
}

}  // namespace settopk
