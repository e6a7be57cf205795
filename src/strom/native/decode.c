/* Kafka v2 records -> Arrow column buffers, for the Spark source (strom.spark.batch_decode).
 *
 * The caller walks the batch headers in Python (few per fetch) and passes, for every batch to
 * decode, the position of its 61-byte header and the end of its (uncompressed) records. Two
 * passes over the same input: strom_scan sizes the output for records with offsets in [lo, hi),
 * strom_fill writes them. Both return 0, or -(position + 1) of the first malformed record.
 * Validity bitmaps must be zeroed by the caller; every other buffer is written in full.
 */
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 61
#define TIMESTAMP_TYPE_MASK 0x08
#define MAX_TIMESTAMP_MS (INT64_MAX / 1000) /* larger ones do not fit Spark's microseconds */

static inline int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}

static inline int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

/* Zig-zag varint (up to 10 bytes); returns 0 when it runs past `end` or is too long. */
static inline int varlong(const uint8_t **pp, const uint8_t *end, int64_t *out) {
    const uint8_t *p = *pp;
    uint64_t raw = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end) return 0;
        uint8_t b = *p++;
        if (shift == 63 && (b & 0x7E)) return 0; /* bits past 64 */
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            *pp = p;
            return 1;
        }
    }
    return 0;
}

typedef struct {
    int64_t offset, timestamp_ms;
    int64_t key_len, value_len;
    const uint8_t *key, *value;
    int64_t header_count;
    const uint8_t *headers;  /* first header, for a second walk */
    const uint8_t *end;      /* end of this record */
} record;

/* Parse one record at *pp; on success *pp is moved past it. */
static int parse_record(const uint8_t **pp, const uint8_t *limit, int64_t base_offset, int64_t base_ts,
                        record *r) {
    const uint8_t *p = *pp;
    int64_t length, ts_delta, offset_delta;
    if (!varlong(&p, limit, &length) || length < 0 || length > limit - p) return 0;
    const uint8_t *end = p + length;
    if (p >= end) return 0;
    p++; /* attributes */
    if (!varlong(&p, end, &ts_delta) || !varlong(&p, end, &offset_delta)) return 0;
    /* Any negative length is null, as Kafka's DefaultRecord reads it. */
    if (!varlong(&p, end, &r->key_len) || r->key_len > end - p) return 0;
    if (r->key_len < 0) r->key_len = -1;
    r->key = p;
    if (r->key_len > 0) p += r->key_len;
    if (!varlong(&p, end, &r->value_len) || r->value_len > end - p) return 0;
    if (r->value_len < 0) r->value_len = -1;
    r->value = p;
    if (r->value_len > 0) p += r->value_len;
    if (!varlong(&p, end, &r->header_count) || r->header_count < 0) return 0;
    r->headers = p;
    /* Java's long arithmetic: wrap, never undefined behaviour */
    r->offset = (int64_t)((uint64_t)base_offset + (uint64_t)offset_delta);
    r->timestamp_ms = (int64_t)((uint64_t)base_ts + (uint64_t)ts_delta);
    r->end = end;
    *pp = end;
    return 1;
}

/* Walk one header: key (never null: a negative length is corrupt), value (bytes or null). */
static int parse_header(const uint8_t **pp, const uint8_t *end, const uint8_t **k, int64_t *klen,
                        const uint8_t **v, int64_t *vlen) {
    const uint8_t *p = *pp;
    if (!varlong(&p, end, klen) || *klen < 0 || *klen > end - p) return 0;
    *k = p;
    p += *klen;
    if (!varlong(&p, end, vlen) || *vlen > end - p) return 0;
    if (*vlen < 0) *vlen = -1; /* null header value */
    *v = p;
    if (*vlen > 0) p += *vlen;
    *pp = p;
    return 1;
}

static inline void set_valid(uint8_t *bitmap, int64_t i) { bitmap[i >> 3] |= (uint8_t)(1u << (i & 7)); }

/* Where strom_fill writes; strom_scan walks with none of it and only counts. */
typedef struct {
    int64_t *offsets, *timestamps_us;
    int32_t *timestamp_types;
    int32_t *key_offsets, *value_offsets, *header_list_offsets, *hkey_offsets, *hvalue_offsets;
    uint8_t *key_data, *key_valid, *value_data, *value_valid, *hkey_data, *hvalue_data, *hvalue_valid;
} columns;

/* The one walk over the records in [lo, hi): sizes[0..5] = records, key bytes, value bytes,
 * headers, header key bytes, header value bytes; with `c`, the columns are written too. */
static int64_t walk(const uint8_t *buf, const int64_t *header_pos, const int64_t *records_end, int64_t batches,
                    int64_t lo, int64_t hi, int32_t with_headers, const columns *c, int64_t *sizes) {
    int64_t n = 0, kb = 0, vb = 0, h = 0, hkb = 0, hvb = 0;
    if (c) {
        c->key_offsets[0] = c->value_offsets[0] = 0;
        if (with_headers) c->header_list_offsets[0] = c->hkey_offsets[0] = c->hvalue_offsets[0] = 0;
    }
    for (int64_t b = 0; b < batches; b++) {
        const uint8_t *hdr = buf + header_pos[b];
        int64_t base_offset = be64(hdr);
        int log_append = (hdr[22] & TIMESTAMP_TYPE_MASK) != 0; /* attributes: int16 at 21, low byte at 22 */
        int64_t base_ts = be64(hdr + 27), max_ts = be64(hdr + 35);
        int32_t count = be32(hdr + 57);
        const uint8_t *p = hdr + HEADER_SIZE, *end = buf + records_end[b];
        for (int32_t i = 0; i < count && p < end; i++) {
            record r;
            const uint8_t *at = p;
            if (!parse_record(&p, end, base_offset, base_ts, &r)) return -(at - buf) - 1;
            if (r.offset < lo) continue;
            if (r.offset >= hi) break;
            int64_t ts = log_append ? max_ts : r.timestamp_ms;
            if (ts > MAX_TIMESTAMP_MS) return -(at - buf) - 1;
            if (c) {
                c->offsets[n] = r.offset;
                c->timestamps_us[n] = (ts > 0 ? ts : 0) * 1000;
                c->timestamp_types[n] = log_append;
                if (r.key_len >= 0) {
                    memcpy(c->key_data + kb, r.key, (size_t)r.key_len);
                    set_valid(c->key_valid, n);
                }
                if (r.value_len >= 0) {
                    memcpy(c->value_data + vb, r.value, (size_t)r.value_len);
                    set_valid(c->value_valid, n);
                }
            }
            if (r.key_len > 0) kb += r.key_len;
            if (r.value_len > 0) vb += r.value_len;
            if (c) {
                c->key_offsets[n + 1] = (int32_t)kb;
                c->value_offsets[n + 1] = (int32_t)vb;
            }
            if (with_headers) {
                const uint8_t *q = r.headers;
                for (int64_t j = 0; j < r.header_count; j++) {
                    const uint8_t *k, *v;
                    int64_t klen, vlen;
                    if (!parse_header(&q, r.end, &k, &klen, &v, &vlen)) return -(at - buf) - 1;
                    if (c) {
                        memcpy(c->hkey_data + hkb, k, (size_t)klen);
                        if (vlen >= 0) {
                            memcpy(c->hvalue_data + hvb, v, (size_t)vlen);
                            set_valid(c->hvalue_valid, h);
                        }
                    }
                    hkb += klen;
                    if (vlen > 0) hvb += vlen;
                    h++;
                    if (c) {
                        c->hkey_offsets[h] = (int32_t)hkb;
                        c->hvalue_offsets[h] = (int32_t)hvb;
                    }
                }
                if (c) c->header_list_offsets[n + 1] = (int32_t)h;
            }
            n++;
        }
    }
    sizes[0] = n; sizes[1] = kb; sizes[2] = vb; sizes[3] = h; sizes[4] = hkb; sizes[5] = hvb;
    return 0;
}

/* out[0..5] = records, key bytes, value bytes, headers, header key bytes, header value bytes. */
int64_t strom_scan(const uint8_t *buf, const int64_t *header_pos, const int64_t *records_end, int64_t batches,
                   int64_t lo, int64_t hi, int32_t with_headers, int64_t *out) {
    return walk(buf, header_pos, records_end, batches, lo, hi, with_headers, NULL, out);
}

int64_t strom_fill(const uint8_t *buf, const int64_t *header_pos, const int64_t *records_end, int64_t batches,
                   int64_t lo, int64_t hi, int32_t with_headers,
                   int64_t *offsets, int64_t *timestamps_us, int32_t *timestamp_types,
                   int32_t *key_offsets, uint8_t *key_data, uint8_t *key_valid,
                   int32_t *value_offsets, uint8_t *value_data, uint8_t *value_valid,
                   int32_t *header_list_offsets, int32_t *hkey_offsets, uint8_t *hkey_data,
                   int32_t *hvalue_offsets, uint8_t *hvalue_data, uint8_t *hvalue_valid) {
    const columns c = {offsets, timestamps_us, timestamp_types, key_offsets, value_offsets, header_list_offsets,
                       hkey_offsets, hvalue_offsets, key_data, key_valid, value_data, value_valid, hkey_data,
                       hvalue_data, hvalue_valid};
    int64_t sizes[6];
    return walk(buf, header_pos, records_end, batches, lo, hi, with_headers, &c, sizes);
}
