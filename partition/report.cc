#include "partition/report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "graph/json_writer.h"
#include "graph/size.h"

namespace overlap {
namespace {

void AppendNames(std::string* out, const Graph& g, const std::vector<NodeId>& ids) {
  out->push_back('[');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out->append(", ");
    AppendJsonString(out, g.node(ids[i]).name());
  }
  out->push_back(']');
}

void AppendStrings(std::string* out, const std::vector<std::string>& v) {
  out->push_back('[');
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out->append(", ");
    AppendJsonString(out, v[i]);
  }
  out->push_back(']');
}

}  // namespace

std::string FormatBucketTable(const Graph& g, const PartitionResult& r, int max_names) {
  std::string out =
      absl::StrFormat("DDP buckets (%s mode, cap %s = %d bytes, first cap %s = %d bytes)\n",
                      PartitionModeName(r.options.mode), FormatBytes(r.options.bucket_cap_bytes),
                      r.options.bucket_cap_bytes, FormatBytes(r.options.first_bucket_cap_bytes),
                      r.options.first_bucket_cap_bytes);
  absl::StrAppendFormat(&out, "%5s  %14s  %10s  %6s  %6s  %s\n", "index", "size (bytes)", "size",
                        "nodes", "params", "param names");
  int64_t total = 0;
  for (const Bucket& b : r.buckets) {
    total += b.size_bytes;
    std::vector<std::string> shown(b.params.begin(),
                                   b.params.begin() + std::min<size_t>(b.params.size(), max_names));
    std::string names = absl::StrJoin(shown, ", ");
    if (b.params.size() > shown.size()) {
      absl::StrAppend(&names, ", ... ", b.params.size() - shown.size(), " more");
    }
    absl::StrAppendFormat(&out, "%5d  %14d  %10s  %6d  %6d  %s\n", b.index, b.size_bytes,
                          FormatBytes(b.size_bytes), b.nodes.size(), b.params.size(), names);
    if (r.options.mode == PartitionMode::kDefault && b.bytes_by_dtype.size() > 1) {
      for (const auto& [dtype, bytes] : b.bytes_by_dtype) {
        absl::StrAppendFormat(&out, "%5s  %14d  %10s  (%s)\n", "", bytes, FormatBytes(bytes),
                              dtype);
      }
    }
  }
  absl::StrAppendFormat(&out, "%d buckets, %s counted\n", r.buckets.size(), FormatBytes(total));
  if (!r.split) {
    absl::StrAppend(&out, "one bucket: the graph is not split\n");
    return out;
  }
  std::vector<std::string> order;
  for (int s : r.pieces.call_order) order.push_back(r.pieces.submodules[s].name);
  absl::StrAppend(&out, "submodules (call order): ", absl::StrJoin(order, " -> "), "\n");
  for (size_t i = 0; i < r.pieces.submodules.size(); ++i) {
    const Submodule& s = r.pieces.submodules[i];
    absl::StrAppendFormat(&out, "  %s: %d nodes, %d inputs, %d outputs", s.name, s.nodes.size(),
                          s.inputs.size(), s.outputs.size());
    if (i < r.compiled.size() && r.compiled[i].attempted) {
      absl::StrAppend(
          &out, r.compiled[i].compiled ? ", compiled" : ", NOT compiled: " + r.compiled[i].error);
    }
    absl::StrAppend(&out, "\n");
  }
  (void)g;
  return out;
}

std::string FormatCapChoice(const CapChoice& c) {
  std::string out = "bucket cap candidates (predicted backward with allreduce overlap):\n";
  absl::StrAppendFormat(&out, "%12s  %8s  %12s  %12s  %12s\n", "cap", "buckets", "backward",
                        "allreduce", "exposed");
  for (const CapCandidate& k : c.candidates) {
    absl::StrAppendFormat(&out, "%12s  %8d  %12s  %12s  %12s%s\n", FormatBytes(k.cap_bytes),
                          k.buckets, FormatSeconds(k.backward_s), FormatSeconds(k.comm_s),
                          FormatSeconds(k.exposed_s),
                          k.cap_bytes == c.cap_bytes ? "  <- chosen" : "");
  }
  return out;
}

std::string PartitionResultJson(const Graph& g, const PartitionResult& r, const CapChoice* cap) {
  std::string out = "{\"format\": \"overlap-result\", \"version\": 1, \"mode\": ";
  AppendJsonString(&out, PartitionModeName(r.options.mode));
  absl::StrAppend(&out, ", \"bucket_cap_bytes\": ", r.options.bucket_cap_bytes,
                  ", \"first_bucket_cap_bytes\": ", r.options.first_bucket_cap_bytes);
  if (cap != nullptr) {
    out.append(",\n \"cap_candidates\": [");
    for (size_t i = 0; i < cap->candidates.size(); ++i) {
      if (i) out.append(", ");
      absl::StrAppend(&out, "{\"cap_bytes\": ", cap->candidates[i].cap_bytes, ", \"exposed_s\": ");
      AppendJsonDouble(&out, cap->candidates[i].exposed_s);
      out.append(", \"backward_s\": ");
      AppendJsonDouble(&out, cap->candidates[i].backward_s);
      out.push_back('}');
    }
    out.push_back(']');
  }
  out.append(",\n \"buckets\": [");
  for (size_t i = 0; i < r.buckets.size(); ++i) {
    const Bucket& b = r.buckets[i];
    out.append(i ? ",\n  " : "\n  ");
    absl::StrAppend(&out, "{\"index\": ", b.index, ", \"size_bytes\": ", b.size_bytes,
                    ", \"params\": ");
    AppendStrings(&out, b.params);
    out.append(", \"nodes\": ");
    AppendNames(&out, g, b.nodes);
    if (r.options.mode == PartitionMode::kDefault) {
      out.append(", \"bytes_by_dtype\": {");
      bool first = true;
      for (const auto& [dtype, bytes] : b.bytes_by_dtype) {
        if (!first) out.append(", ");
        first = false;
        AppendJsonString(&out, dtype);
        absl::StrAppend(&out, ": ", bytes);
      }
      out.push_back('}');
    }
    out.push_back('}');
  }
  out.append(r.buckets.empty() ? "]" : "\n ]");
  out.append(",\n \"submodules\": [");
  for (size_t i = 0; i < r.pieces.submodules.size(); ++i) {
    const Submodule& s = r.pieces.submodules[i];
    out.append(i ? ",\n  " : "\n  ");
    out.append("{\"name\": ");
    AppendJsonString(&out, s.name);
    out.append(", \"nodes\": ");
    AppendNames(&out, g, s.nodes);
    out.append(", \"inputs\": ");
    AppendNames(&out, g, s.inputs);
    out.append(", \"outputs\": ");
    AppendNames(&out, g, s.outputs);
    if (i < r.compiled.size() && r.compiled[i].attempted) {
      absl::StrAppend(&out, ", \"compiled\": ", r.compiled[i].compiled ? "true" : "false");
      if (!r.compiled[i].compiled) {
        out.append(", \"compile_error\": ");
        AppendJsonString(&out, r.compiled[i].error);
      }
    }
    out.push_back('}');
  }
  out.append(r.pieces.submodules.empty() ? "]" : "\n ]");
  out.append(",\n \"call_order\": [");
  for (size_t i = 0; i < r.pieces.call_order.size(); ++i) {
    if (i) out.append(", ");
    AppendJsonString(&out, r.pieces.submodules[r.pieces.call_order[i]].name);
  }
  out.append("]}\n");
  return out;
}

}  // namespace overlap
