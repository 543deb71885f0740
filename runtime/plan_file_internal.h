// Pieces of the plan file shared by its writer and reader (runtime/plan_file*.cpp only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/hash.h"
#include "runtime/plan_file.h"

namespace zenmoe::plan::detail {

inline constexpr char kPlanMagic[4] = {'Z', 'P', 'L', 'N'};
inline constexpr char kWeightsMagic[4] = {'Z', 'P', 'L', 'W'};
inline constexpr size_t kPlanHeaderBytes = 40;     // magic .. body_checksum
inline constexpr size_t kWeightsHeaderBytes = 24;  // magic, version, weights_id, total bytes

// The JSON document of a header (everything except the kernel descriptors, which follow it
// as raw bytes). Deterministic for a given header.
std::string encode_json(const PlanHeader& h);
// Parses and type-checks the document into `out` (kernels untouched). `where` prefixes errors.
Status decode_json(std::string_view text, const std::string& where, PlanHeader* out);

// Checks every field of a header except the tensor placement (targets, features, threads,
// names, packed layouts, mat_stride, kernel descriptors).
Status validate_fields(const PlanHeader& h, const std::string& where);
// Checks the placement against a side file of weights_bytes bytes: 4096-aligned offsets after
// the header page, nbytes = n_mats x mat_stride, inside the file, no two tensors overlapping.
Status validate_placement(const PlanHeader& h, const std::string& where);
// Fills mat_stride (when 0), nbytes, offset and weights_bytes; the fields must be valid.
Status place_tensors(PlanHeader* h, const std::string& where);

// Reads bytes [0, size) of the file at `path` into dst: chunks of `chunk` bytes dealt out to
// `threads` threads in turn, so the first touch of the destination pages (zeroing fresh huge
// pages, the larger part of the cost) runs on every thread too. Error if the file is shorter.
Status read_file_parallel(const std::string& path, uint8_t* dst, uint64_t size, int threads, uint64_t chunk);

// Parses and validates plan file bytes (everything read_plan checks except the side file);
// `weights_id` receives the id the side file must carry. Never reads outside [data, data+n).
Expected<PlanHeader> parse_plan(const uint8_t* data, size_t n, const std::string& where,
                                uint64_t* weights_id);
// Checks the side file's header page (n bytes mapped at data) against the plan.
Status check_weights_header(const uint8_t* data, uint64_t n, const PlanHeader& h, uint64_t weights_id,
                            const std::string& where);

// Little-endian fixed-width helpers (x86-64 is little-endian; memcpy keeps them alignment-safe).
void put_u32(std::string* out, uint32_t v);
void put_u64(std::string* out, uint64_t v);
uint32_t get_u32(const uint8_t* p);
uint64_t get_u64(const uint8_t* p);

}  // namespace zenmoe::plan::detail
