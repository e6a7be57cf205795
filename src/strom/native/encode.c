/* Kafka record encoding for the Spark sink, straight from Arrow buffers.
 *
 * The sink hands over the buffers of its Arrow columns (validity bitmap, offsets, data and the
 * array offset of each) and gets back partitions per row, rows grouped per partition, and the
 * records section of v2 record batches. strom/spark/batch_encode.py holds the pure-Python twin
 * of every function here; the property tests require byte-identical results.
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A binary or string Arrow column (int32 offsets, or int64 when `large`). */
typedef struct {
    const uint8_t *validity; /* NULL: no nulls */
    const void *offsets;
    const uint8_t *data;
    int64_t offset; /* the array's offset into its buffers */
    int32_t large;
} strom_bytes_col;

/* list<struct<key: string, value: binary>>; `keys`/`values` are the struct's children as the
 * struct (already offset) exposes them, so a struct element j is child element j. */
typedef struct {
    const uint8_t *validity;
    const void *offsets;
    int64_t offset;
    int32_t large;
    const uint8_t *struct_validity;
    int64_t struct_offset;
    strom_bytes_col keys;
    strom_bytes_col values;
} strom_headers_col;

/* An int32 Arrow column (the explicit `partition`). */
typedef struct {
    const uint8_t *validity;
    const int32_t *values;
    int64_t offset;
} strom_int_col;

enum { STROM_OK = 0, STROM_BUFFER_TOO_SMALL = 1, STROM_NULL_HEADER_KEY = 2, STROM_BAD_PARTITION = 3 };

static inline int is_valid(const uint8_t *validity, int64_t i) {
    return validity == NULL || ((validity[i >> 3] >> (i & 7)) & 1);
}

static inline int64_t offset_at(const void *offsets, int32_t large, int64_t i) {
    return large ? ((const int64_t *)offsets)[i] : (int64_t)((const int32_t *)offsets)[i];
}

/* Element `i` (logical) of a bytes column: its length, or -1 when null. */
static inline int64_t bytes_at(const strom_bytes_col *c, int64_t i, const uint8_t **ptr) {
    int64_t p = c->offset + i;
    if (!is_valid(c->validity, p))
        return -1;
    int64_t start = offset_at(c->offsets, c->large, p);
    *ptr = c->data + start;
    return offset_at(c->offsets, c->large, p + 1) - start;
}

/* Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), seed 0x9747b28c. */
int32_t strom_murmur2(const uint8_t *data, int64_t length) {
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    int64_t n4 = length / 4;
    for (int64_t i = 0; i < n4; i++) {
        const uint8_t *b = data + 4 * i;
        uint32_t k = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const uint8_t *tail = data + (length & ~(int64_t)3);
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)tail[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

/* Partition of each of `n` rows: the explicit `parts` value where given (may be NULL), else
 * toPositive(murmur2(key)) % num_partitions, else (null key) `null_key_partition`.
 * Returns STROM_OK, or STROM_BAD_PARTITION with *bad_row set for an explicit partition outside
 * 0..num_partitions-1. */
int strom_partitions(const strom_bytes_col *keys, const strom_int_col *parts, int64_t n, int32_t num_partitions,
                     int32_t null_key_partition, int32_t *out, int64_t *bad_row) {
    for (int64_t i = 0; i < n; i++) {
        if (parts != NULL && is_valid(parts->validity, parts->offset + i)) {
            int32_t p = parts->values[parts->offset + i];
            if (p < 0 || p >= num_partitions) {
                *bad_row = i;
                return STROM_BAD_PARTITION;
            }
            out[i] = p;
            continue;
        }
        const uint8_t *key = NULL;
        int64_t len = keys != NULL ? bytes_at(keys, i, &key) : -1;
        if (len < 0)
            out[i] = null_key_partition;
        else
            out[i] = (int32_t)(((uint32_t)strom_murmur2(key, len) & 0x7fffffffu) % (uint32_t)num_partitions);
    }
    return STROM_OK;
}

/* Stable counting sort of rows by partition: `starts` (num_partitions + 1 entries) gets where
 * each partition's rows begin in `rows_out`. */
void strom_group_by_partition(const int32_t *parts, int64_t n, int32_t num_partitions, int32_t *rows_out,
                              int64_t *starts) {
    memset(starts, 0, sizeof(int64_t) * ((size_t)num_partitions + 1));
    for (int64_t i = 0; i < n; i++)
        starts[parts[i] + 1]++;
    for (int32_t p = 0; p < num_partitions; p++)
        starts[p + 1] += starts[p];
    /* starts[p] is now where p begins; use it as p's cursor while filling */
    for (int64_t i = 0; i < n; i++) {
        int32_t p = parts[i];
        rows_out[starts[p]++] = (int32_t)i;
    }
    /* starts[p] now holds the end of p: shift back to get the beginnings */
    for (int32_t p = num_partitions; p > 0; p--)
        starts[p] = starts[p - 1];
    starts[0] = 0;
}

static inline int varint_size(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int s = 1;
    while (z >= 0x80) {
        z >>= 7;
        s++;
    }
    return s;
}

static inline uint8_t *put_varint(uint8_t *p, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        *p++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *p++ = (uint8_t)z;
    return p;
}

static inline uint8_t *put_bytes(uint8_t *p, const uint8_t *src, int64_t len) {
    p = put_varint(p, len);
    if (len > 0) {
        memcpy(p, src, (size_t)len);
        p += len;
    }
    return p;
}

/* Size of one record's body (everything after its length varint); -1 for a null header key. */
static int64_t body_size(int64_t delta, int64_t klen, int64_t vlen, const strom_headers_col *h, int64_t row,
                         int64_t *hfirst, int64_t *hcount) {
    int64_t size = 1 + 1 + varint_size(delta); /* attributes, timestamp delta 0, offset delta */
    size += varint_size(klen) + (klen > 0 ? klen : 0);
    size += varint_size(vlen) + (vlen > 0 ? vlen : 0);
    *hfirst = 0;
    *hcount = 0;
    if (h != NULL && is_valid(h->validity, h->offset + row)) {
        int64_t a = offset_at(h->offsets, h->large, h->offset + row);
        int64_t b = offset_at(h->offsets, h->large, h->offset + row + 1);
        *hfirst = a;
        *hcount = b - a;
        for (int64_t j = a; j < b; j++) {
            const uint8_t *ptr;
            if (!is_valid(h->struct_validity, h->struct_offset + j))
                return -1;
            int64_t hk = bytes_at(&h->keys, j, &ptr);
            if (hk < 0)
                return -1;
            int64_t hv = bytes_at(&h->values, j, &ptr);
            size += varint_size(hk) + hk + varint_size(hv) + (hv > 0 ? hv : 0);
        }
    }
    size += varint_size(*hcount);
    return size;
}

/* Encode the records section of one batch from rows[0..nrows): offset deltas from 0, timestamp
 * deltas 0. Stops before the record that would take the section past `limit` bytes, but always
 * takes the first. *out_len gets the bytes written and *out_rows the rows taken.
 * Returns STROM_OK; STROM_BUFFER_TOO_SMALL when the first record alone exceeds `cap` (*out_len =
 * its size); STROM_NULL_HEADER_KEY (*out_rows = index into rows) for a header without a key. */
int strom_encode_records(const int32_t *rows, int64_t nrows, const strom_bytes_col *keys,
                         const strom_bytes_col *values, const strom_headers_col *headers, int64_t limit,
                         uint8_t *out, int64_t cap, int64_t *out_len, int64_t *out_rows) {
    uint8_t *p = out;
    int64_t used = 0;
    int64_t i = 0;
    for (; i < nrows; i++) {
        int64_t row = rows[i];
        const uint8_t *kptr = NULL, *vptr = NULL;
        int64_t klen = keys != NULL ? bytes_at(keys, row, &kptr) : -1;
        int64_t vlen = bytes_at(values, row, &vptr);
        int64_t hfirst, hcount;
        int64_t body = body_size(i, klen, vlen, headers, row, &hfirst, &hcount);
        if (body < 0) {
            *out_len = used;
            *out_rows = i;
            return STROM_NULL_HEADER_KEY;
        }
        int64_t total = varint_size(body) + body;
        if (i > 0 && (used + total > limit || used + total > cap))
            break;
        if (used + total > cap) {
            *out_len = total;
            *out_rows = 0;
            return STROM_BUFFER_TOO_SMALL;
        }
        p = put_varint(p, body);
        *p++ = 0; /* attributes */
        *p++ = 0; /* timestamp delta */
        p = put_varint(p, i);
        p = put_bytes(p, kptr, klen);
        p = put_bytes(p, vptr, vlen);
        p = put_varint(p, hcount);
        for (int64_t j = hfirst; j < hfirst + hcount; j++) {
            const uint8_t *hk = NULL, *hv = NULL;
            int64_t hklen = bytes_at(&headers->keys, j, &hk);
            int64_t hvlen = bytes_at(&headers->values, j, &hv);
            p = put_bytes(p, hk, hklen);
            p = put_bytes(p, hv, hvlen);
        }
        used += total;
    }
    *out_len = used;
    *out_rows = i;
    return STROM_OK;
}
