// Device code shared by the kernels of settopk/kernels/cuda: the scores, least overlaps
// and the candidate encoding. bitslice_topk.cu (the scan) and postings_topk.cu
// (the postings) both include it, so the two paths make the same keys and
// candidates, and each is compiled as a program of its own
// (settopk/kernels/cuda/modules.py passes -I with this directory).
//
// Scores: every kernel that needs the score takes it as a runtime argument (a
// Score value, the index of the name in kernels.SCORES) with the key's scale S
// and cosine's keys (CupyShardIndex._cosine_keys: kernels.cosine_key_table, the
// key of overlap o with a doc of length d at d (d + 1) / 2 + o, followed by
// kernels.cosine_key_fractions, the fraction o^2 / d of each key packed as
// (o << 16) | d; any pointer for the other scores, which never read it).
// The score enters only where keys are made or inverted (need_overlap,
// encode_candidate, the decode), never in the counting loop, and it is the same
// for a whole launch, so the branch costs nothing measurable and one compiled
// module serves every score.
//
// Candidate encoding (unsigned 64-bit, larger is better, 0 = empty):
//   (key << 32) | ~position
// with key = floor(S * num / den) (kernels.score_key; for Braun-Blanquet
// (S * overlap) / max(|q|, |d|); cosine's from its table, below 2**23), below
// 2**32 for every score (S <= 4 * 4096**2 for max_len <= 4096), and
// position < 2**31, so
// ~position has its top bit set and a real candidate is never 0. Sorting
// descending gives key descending, then position ascending.

#pragma once

namespace settopk {

constexpr int kNeverLen = 255;     // least-overlap value no counter of 8 planes can pass (uint8 tables)
constexpr long long kNarrowScale = 1 << 16;  // S below this: max_len <= 255, so S * overlap < 2**32

// The scores, in the order of kernels.SCORES (tests/test_keys.py checks it).
enum Score : int {
    kBraunBlanquet = 0,  // o / max(|q|, |d|)
    kJaccard = 1,        // o / (|q| + |d| - o)
    kCosine = 2,         // ranked by o^2 / (|q| |d|); keyed by the rank of o^2 / |d| (one query's |q| is fixed)
    kDice = 3,           // 2 o / (|q| + |d|)
    kOverlap = 4,        // o
    kContainment = 5,    // o / |q|
};

// Denominator of the score's fraction for these lengths (for jaccard the one at
// overlap 0, |q| + |d|, which is 0 exactly where |q u d| is).
__device__ __forceinline__ long long score_den(int score, int query_len, int doc_len) {
    switch (score) {
        case kBraunBlanquet: return max(query_len, doc_len);
        case kCosine: return static_cast<long long>(query_len) * doc_len;
        case kOverlap: return 1;
        case kContainment: return query_len;
        default: return query_len + doc_len;  // jaccard, dice
    }
}

// The tiles of the GPU postings (postings_topk.cu's layout; layout_postings in
// bitslice_topk.cu builds a wide shard's): 65536 consecutive doc positions each.
constexpr int kPostTileBits = 16;
constexpr int kPostTile = 1 << kPostTileBits;

// Where the row of doc length d starts in cosine's key table (rows 0..d - 1 hold 1..d keys).
__device__ __forceinline__ int cosine_row(int doc_len) { return doc_len * (doc_len + 1) / 2; }

// Cosine's key of overlap o (<= doc_len) with a doc of doc_len ids.
__device__ __forceinline__ long long cosine_key(const int* __restrict__ cosine_keys, int overlap, int doc_len) {
    return cosine_keys[cosine_row(doc_len) + overlap];
}

// Unclamped least overlap whose key is > t: kernels.keys.least_overlap (see
// kernels.min_overlap_above for the derivation). scale = S; max_key = S, or
// max_len for overlap. t is clipped to [-1, max_key] as on the host. Cosine's
// key t + 1 is the rank of a fraction a^2 / b (read from its table), so its
// least overlap is the least o with o^2 b >= a^2 |d|: the ceiling of the square
// root of ceil(a^2 |d| / b), in 64-bit integers (a^2 |d| <= 2**36).
__device__ __forceinline__ long long least_overlap(long long t, int query_len, int doc_len, long long scale,
                                                   int max_len, int score, const int* __restrict__ cosine_keys) {
    const long long top = score == kOverlap ? max_len : scale;
    const long long t1 = score == kCosine ? t + 1 : min(max(t, -1ll), top) + 1;  // t + 1, in [0, max_key + 1]
    const long long den = score_den(score, query_len, doc_len);
    if (den == 0) return t1 <= 0 ? 0 : max_len + 1;  // the key is always 0 (0/0)
    switch (score) {
        case kJaccard: return (t1 * den + scale + t1 - 1) / (scale + t1);
        case kCosine: {
            if (t1 <= 0) return 0;
            const int n_keys = cosine_row(max_len + 1);
            if (t1 > cosine_keys[n_keys - 1]) return max_len + 1;  // above the largest key, max_len^2 / max_len's
            const unsigned fraction = static_cast<unsigned>(cosine_keys[n_keys + t1]);
            const long long a = fraction >> 16, b = fraction & 0xffffu;
            const long long x = (a * a * doc_len + b - 1) / b;  // o^2 must reach this
            long long r = static_cast<long long>(sqrt(static_cast<double>(x)));
            while (r * r > x) --r;
            while ((r + 1) * (r + 1) <= x) ++r;
            if (r * r < x) ++r;
            return r <= doc_len ? r : max_len + 1;
        }
        case kDice: return (t1 * den + 2 * scale - 1) / (2 * scale);
        default: return (t1 * den + scale - 1) / scale;  // braun_blanquet, overlap, containment
    }
}

// least_overlap clamped to `never` (kNeverLen for 8 counter planes; 2**13 - 1 for 13, which
// count overlaps up to 4096). The clamp is above max_len, so it only marks a threshold that
// no doc can reach.
__device__ __forceinline__ int need_overlap(long long t, int query_len, int doc_len, long long scale, int max_len,
                                            int score, const int* __restrict__ cosine_keys, int never = kNeverLen) {
    return static_cast<int>(min(least_overlap(t, query_len, doc_len, scale, max_len, score, cosine_keys),
                                static_cast<long long>(never)));
}

// Braun-Blanquet, the default, in 32-bit math: S * overlap <= 255**3 < 2**32 (scale < kNarrowScale).
__device__ __forceinline__ unsigned long long encode_braun_blanquet(unsigned scale, int overlap, int query_len,
                                                                    int doc_len, int position) {
    const unsigned m = static_cast<unsigned>(max(query_len, doc_len));
    const unsigned key = m > 0 ? scale * static_cast<unsigned>(overlap) / m : 0u;
    return (static_cast<unsigned long long>(key) << 32) | static_cast<unsigned>(~position);
}

// The exact key floor(S * num / den) (0 for 0/0), in 64-bit integers: S * num < 2**48; cosine's from its table.
__device__ __forceinline__ unsigned long long encode_candidate(int score, long long scale,
                                                               const int* __restrict__ cosine_keys, int overlap,
                                                               int query_len, int doc_len, int position) {
    if (score == kBraunBlanquet && scale < kNarrowScale)
        return encode_braun_blanquet(static_cast<unsigned>(scale), overlap, query_len, doc_len, position);
    unsigned long long key;
    if (score == kCosine) {
        key = static_cast<unsigned long long>(cosine_key(cosine_keys, overlap, doc_len));
    } else {
        long long num = overlap;
        long long den = score_den(score, query_len, doc_len);
        if (score == kJaccard) den -= overlap;
        else if (score == kDice) num = 2ll * overlap;
        key = den > 0 ? static_cast<unsigned long long>(scale * num / den) : 0ull;  // < 2**32
    }
    return (key << 32) | static_cast<unsigned>(~position);
}

}  // namespace settopk
