// overlap's Python extension, `overlap._overlap` (python/overlap/__init__.py re-exports it):
// the graph, its verifier and annotator, the DDP partitioner, ZeRO-3 insertion, every
// scheduler, the step planner and the simulator, on graphs held in C++.
//
// Conventions (docs/torch.md):
//   - A failed absl::Status raises overlap.Error (a subclass per status code, each also the
//     nearest Python built-in: InvalidArgumentError is a ValueError, ...) with the Status's
//     message; its `code` attribute is the code's name ("INVALID_ARGUMENT").
//   - Passes change the Graph they are given in place, as the C++ passes do, and return
//     their report as a dict of plain Python values (the stubs, _overlap.pyi, type them).
//   - Every pass runs with the GIL released: the graph is C++ data no Python code touches,
//     so other Python threads run meanwhile (a Graph must not be used by two threads at
//     once, as in C++).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "graph/annotate.h"
#include "graph/cost_model.h"
#include "graph/graph.h"
#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/print.h"
#include "graph/verifier.h"
#include "partition/bucket_cap.h"
#include "partition/buckets.h"
#include "partition/ddp_partitioner.h"
#include "schedule/scheduler_registry.h"
#include "schedule/simulator.h"
#include "schedule/step_plan.h"
#include "schedule/zero3_insertion.h"
#include "schedule/zero3_ops.h"

namespace py = pybind11;

namespace overlap {
namespace {

// overlap.Error and its subclasses, created at import (InitErrors); indexed by status code.
struct ErrorTypes {
  py::object base;
  std::vector<std::pair<absl::StatusCode, py::object>> by_code;
};
ErrorTypes* errors = nullptr;

[[noreturn]] void Raise(const absl::Status& s) {
  py::object type = errors->base;
  for (const auto& [code, t] : errors->by_code) {
    if (code == s.code()) type = t;
  }
  py::object e = type(std::string(s.message()));
  e.attr("code") = absl::StatusCodeToString(s.code());
  PyErr_SetObject(type.ptr(), e.ptr());
  throw py::error_already_set();
}

void Check(const absl::Status& s) {
  if (!s.ok()) Raise(s);
}

template <typename T>
T Take(absl::StatusOr<T> s) {
  if (!s.ok()) Raise(s.status());
  return *std::move(s);
}

void InitErrors(py::module_& m) {
  errors = new ErrorTypes;  // lives as long as the module (never unloaded)
  py::object builtins = py::module_::import("builtins");
  errors->base = py::reinterpret_steal<py::object>(
      PyErr_NewExceptionWithDoc("overlap.Error",
                                "A failed overlap call: its message says what and where; "
                                "`code` is the status code's name.",
                                PyExc_RuntimeError, nullptr));
  m.attr("Error") = errors->base;
  struct Row {
    absl::StatusCode code;
    const char* name;
    const char* builtin;  // also an instance of this built-in exception, or null
  };
  static constexpr Row kRows[] = {
      {absl::StatusCode::kInvalidArgument, "InvalidArgumentError", "ValueError"},
      {absl::StatusCode::kNotFound, "NotFoundError", "LookupError"},
      {absl::StatusCode::kUnimplemented, "UnimplementedError", "NotImplementedError"},
      {absl::StatusCode::kFailedPrecondition, "FailedPreconditionError", nullptr},
      {absl::StatusCode::kOutOfRange, "OutOfRangeError", "ValueError"},
      {absl::StatusCode::kResourceExhausted, "ResourceExhaustedError", nullptr},
      {absl::StatusCode::kDeadlineExceeded, "DeadlineExceededError", "TimeoutError"},
      {absl::StatusCode::kUnavailable, "UnavailableError", "ConnectionError"},
      {absl::StatusCode::kAborted, "AbortedError", nullptr},
      {absl::StatusCode::kInternal, "InternalError", nullptr},
  };
  for (const Row& r : kRows) {
    py::tuple bases = r.builtin != nullptr ? py::make_tuple(errors->base, builtins.attr(r.builtin))
                                           : py::make_tuple(errors->base);
    const std::string qualified = absl::StrCat("overlap.", r.name);
    py::object t = py::reinterpret_steal<py::object>(
        PyErr_NewException(qualified.c_str(), bases.ptr(), nullptr));
    m.attr(r.name) = t;
    errors->by_code.emplace_back(r.code, t);
  }
}

std::vector<std::string> Names(const Graph& g, const std::vector<NodeId>& ids) {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (NodeId id : ids) out.push_back(g.node(id).name());
  return out;
}

py::dict SimulationDict(const SimulationResult& r) {
  py::dict d;
  d["peak_memory_bytes"] = r.peak_memory_bytes;
  d["peak_gathered_bytes"] = r.peak_gathered_bytes;
  d["step_time_s"] = r.step_time_s;
  d["compute_s"] = r.compute_s;
  d["comm_s"] = r.comm_s;
  d["host_s"] = r.host_s;
  d["exposed_comm_s"] = r.exposed_comm_s;
  d["lower_bound_s"] = r.lower_bound_s;
  return d;
}

py::dict FiguresDict(const StepFigures& f) {
  py::dict d;
  d["peak_memory_bytes"] = f.peak_memory_bytes;
  d["forward_peak_bytes"] = f.forward_peak_bytes;
  d["backward_peak_bytes"] = f.backward_peak_bytes;
  d["resident_bytes"] = f.resident_bytes;
  d["residents"] = f.residents;
  d["step_time_s"] = f.step_time_s;
  d["forward_time_s"] = f.forward_time_s;
  d["backward_time_s"] = f.backward_time_s;
  d["compute_s"] = f.compute_s;
  d["comm_s"] = f.comm_s;
  d["host_s"] = f.host_s;
  d["exposed_comm_s"] = f.exposed_comm_s;
  return d;
}

// The collective model from keyword arguments (the CLI's --world-size, --latency-us,
// --bandwidth-gbps); InvalidArgument when they make no sense.
CollectiveModel Collectives(int world_size, double latency_s, double bandwidth_bytes_per_s) {
  CollectiveModel c;
  c.world_size = world_size;
  c.latency_s = latency_s;
  c.bandwidth_bytes_per_s = bandwidth_bytes_per_s;
  if (!c.Valid()) {
    Raise(absl::InvalidArgumentError(absl::StrCat(
        "collective model: world_size must be >= 1 (got ", world_size, "), latency_s >= 0 (got ",
        latency_s, ") and bandwidth_bytes_per_s > 0 (got ", bandwidth_bytes_per_s, ")")));
  }
  return c;
}

PartitionMode Mode(const std::string& name) {
  PartitionMode m;
  if (!ParsePartitionMode(name, &m)) {
    Raise(absl::InvalidArgumentError(absl::StrCat("mode: unknown partition mode \"", name,
                                                  "\" (reference, reference-2x or default)")));
  }
  return m;
}

GraphKind Kind(const std::string& name) {
  if (name == "forward") return GraphKind::kForward;
  if (name == "backward") return GraphKind::kBackward;
  Raise(absl::InvalidArgumentError(
      absl::StrCat("kind: \"", name, "\" is neither \"forward\" nor \"backward\"")));
}

// first_bucket_cap_bytes: none is DDP's 1 MiB, or the cap when that is smaller (a first
// cap above the cap is an error in C++).
py::list Partition(const Graph& g, int64_t bucket_cap_bytes,
                   std::optional<int64_t> first_bucket_cap_bytes, const std::string& mode) {
  BucketOptions options;
  options.mode = Mode(mode);
  options.bucket_cap_bytes = bucket_cap_bytes;
  options.first_bucket_cap_bytes =
      first_bucket_cap_bytes.value_or(std::min(kDefaultFirstBucketCapBytes, bucket_cap_bytes));
  absl::StatusOr<std::vector<Bucket>> buckets;
  {
    py::gil_scoped_release release;
    absl::Status ok = Verify(g);
    buckets = ok.ok() ? AssignBuckets(g, options) : absl::StatusOr<std::vector<Bucket>>(ok);
  }
  py::list out;
  for (const Bucket& b : Take(std::move(buckets))) {
    py::dict d;
    d["index"] = b.index;
    d["size_bytes"] = b.size_bytes;
    d["params"] = b.params;
    d["nodes"] = Names(g, b.nodes);
    d["bytes_by_dtype"] = b.bytes_by_dtype;
    out.append(d);
  }
  return out;
}

py::dict Schedule(Graph& g, const std::string& algorithm, std::optional<int64_t> budget_bytes,
                  bool keep_residents, int world_size, double latency_s,
                  double bandwidth_bytes_per_s) {
  SchedulerOptions options;
  options.collectives = Collectives(world_size, latency_s, bandwidth_bytes_per_s);
  options.record_trace = false;
  options.lookahead.budget_bytes = budget_bytes;
  options.lookahead.keep_residents = keep_residents;
  absl::StatusOr<ScheduleReport> report;
  {
    py::gil_scoped_release release;
    report = RunScheduler(algorithm, &g, options);
  }
  ScheduleReport r = Take(std::move(report));
  py::dict d;
  d["algorithm"] = r.algorithm;
  d["order"] = Names(g, r.order);
  d["simulation"] = SimulationDict(r.simulation);
  d["scheduler_s"] = r.scheduler_s;
  return d;
}

py::dict Plan(Graph& forward, Graph& backward, const std::string& algorithm,
              std::optional<int64_t> budget_bytes, bool recompute, bool offload,
              bool wait_for_reductions, int world_size, double latency_s,
              double bandwidth_bytes_per_s) {
  if (&forward == &backward) {
    Raise(absl::InvalidArgumentError("plan: forward and backward are the same Graph"));
  }
  StepPlanOptions options;
  options.budget_bytes = budget_bytes;
  options.collectives = Collectives(world_size, latency_s, bandwidth_bytes_per_s);
  options.recompute = recompute;
  options.offload = offload;
  options.wait_for_reductions = wait_for_reductions;
  absl::StatusOr<StepPlan> plan;
  {
    py::gil_scoped_release release;
    plan = PlanStep(algorithm, &forward, &backward, options);
  }
  StepPlan p = Take(std::move(plan));
  py::dict d;
  d["algorithm"] = p.algorithm;
  d["fits"] = p.fits;
  d["min_feasible_bytes"] = p.min_feasible_bytes;
  d["resident"] = p.resident;
  d["reduce_bucket_bytes"] = p.reduce_bucket_bytes;
  d["forward_lookahead"] = p.forward_lookahead;
  d["backward_lookahead"] = p.backward_lookahead;
  d["reduce_waits"] = p.reduce_waits;
  d["recomputed"] = static_cast<int64_t>(p.recomputed.size());
  d["offloaded"] = static_cast<int64_t>(p.offloaded.size());
  d["figures"] = FiguresDict(p.simulation.figures);
  d["forward"] = SimulationDict(p.simulation.forward);
  d["backward"] = SimulationDict(p.simulation.backward);
  return d;
}

void DefineGraph(py::module_& m) {
  py::class_<Graph>(m, "Graph", "A dataflow graph (docs/format.md), held in C++.")
      .def_static(
          "from_json",
          [](const std::string& text) {
            absl::StatusOr<Graph> g;
            {
              py::gil_scoped_release release;
              g = ReadGraphJson(text);
            }
            return Take(std::move(g));
          },
          py::arg("text"), "Reads a graph from its JSON text (docs/format.md).")
      .def(
          "to_json",
          [](const Graph& g) {
            py::gil_scoped_release release;
            return WriteGraphJson(g);
          },
          "The graph as JSON text (docs/format.md).")
      .def(
          "copy", [](const Graph& g) { return Graph(g); }, "An independent copy.")
      .def_property_readonly("name", [](const Graph& g) { return g.name(); })
      .def(
          "node_names", [](const Graph& g) { return Names(g, g.OrderVector()); },
          "Node names in execution order.")
      .def(
          "param_names",
          [](const Graph& g) {
            std::vector<std::string> out;
            for (const Param& p : g.params()) out.push_back(p.name);
            return out;
          },
          "Parameter names, in the table's order.")
      .def("__len__", [](const Graph& g) { return g.size(); })
      .def("__str__", [](const Graph& g) { return PrintGraph(g); })
      .def("__repr__", [](const Graph& g) {
        return absl::StrCat("<overlap.Graph \"", g.name(), "\": ", g.size(), " nodes, ",
                            g.params().size(), " parameters>");
      });
}

void DefinePasses(py::module_& m) {
  m.def(
      "verify",
      [](const Graph& g) {
        absl::Status s;
        {
          py::gil_scoped_release release;
          s = Verify(g);
        }
        Check(s);
      },
      py::arg("graph"), "Raises InvalidArgumentError naming the node when the graph is malformed.");

  m.def(
      "annotate",
      [](Graph& g, bool overwrite, std::optional<double> peak_flops_32bit,
         std::optional<double> peak_flops_16bit, std::optional<double> memory_bandwidth) {
        AnnotateOptions options;
        options.overwrite = overwrite;
        // The device's figures (H100 SXM's unless given): a CPU's, measured, for a cost
        // model of the machine that runs the graph.
        for (const auto& [value, field, name] :
             {std::make_tuple(peak_flops_32bit, &options.device.peak_flops_32bit,
                              "peak_flops_32bit"),
              std::make_tuple(peak_flops_16bit, &options.device.peak_flops_16bit,
                              "peak_flops_16bit"),
              std::make_tuple(memory_bandwidth, &options.device.memory_bandwidth,
                              "memory_bandwidth")}) {
          if (!value) continue;
          if (!(*value > 0)) {
            Raise(absl::InvalidArgumentError(
                absl::StrCat("annotate: ", name, " must be > 0 (got ", *value, ")")));
          }
          *field = *value;
        }
        absl::StatusOr<AnnotateReport> r;
        {
          py::gil_scoped_release release;
          r = AnnotateCosts(g, options);
        }
        AnnotateReport a = Take(std::move(r));
        py::dict d;
        d["device_times_filled"] = a.device_times_filled;
        d["tensor_sizes_filled"] = a.tensor_sizes_filled;
        d["by_formula"] = a.by_formula;
        d["fallback"] = a.fallback;
        d["fallback_ops"] = a.fallback_ops;
        d["total_device_time"] = a.total_device_time;
        return d;
      },
      py::arg("graph"), py::kw_only(), py::arg("overwrite") = false,
      py::arg("peak_flops_32bit") = py::none(), py::arg("peak_flops_16bit") = py::none(),
      py::arg("memory_bandwidth") = py::none(),
      "Fills meta.device_time and meta.tensor_size from the cost model (docs/cost-model.md), "
      "on an H100 SXM's figures unless the device's are given (FLOP/s, bytes/s).");

  m.def("partition", &Partition, py::arg("graph"), py::kw_only(),
        py::arg("bucket_cap_bytes") = kDefaultBucketCapBytes,
        py::arg("first_bucket_cap_bytes") = py::none(), py::arg("mode") = "default",
        "DDP gradient buckets (docs/ddp-optimizer.md): a list of dicts, nearest the inputs "
        "first.");

  m.def(
      "insert_zero3",
      [](Graph& g, const std::string& kind) {
        const GraphKind k = Kind(kind);
        absl::StatusOr<bool> changed;
        {
          py::gil_scoped_release release;
          absl::Status ok = Verify(g);
          changed = ok.ok() ? Zero3Insertion(k).Run(&g) : absl::StatusOr<bool>(ok);
        }
        return Take(std::move(changed));
      },
      py::arg("graph"), py::kw_only(), py::arg("kind") = "forward",
      "Inserts ZeRO-3's gathers, waits, releases (and, in a backward, reduce-scatters) in "
      "place (docs/deepcompile.md); returns whether the graph changed.");

  m.def(
      "schedulers",
      [] {
        py::list out;
        for (const SchedulerEntry& e : Schedulers()) {
          py::dict d;
          d["name"] = std::string(e.name);
          d["description"] = std::string(e.description);
          d["honours_budget"] = e.honours_budget;
          out.append(d);
        }
        return out;
      },
      "Every scheduler, the default first.");

  m.def("schedule", &Schedule, py::arg("graph"), py::kw_only(),
        py::arg("algorithm") = std::string(DefaultSchedulerName()),
        py::arg("budget_bytes") = py::none(), py::arg("keep_residents") = true,
        py::arg("world_size") = 32, py::arg("latency_s") = 20e-6,
        py::arg("bandwidth_bytes_per_s") = 50e9,
        "Orders a graph with ZeRO-3 ops in place by the named scheduler; returns its report. "
        "keep_residents=False: ours holds no parameter gathered across the graph.");

  m.def("plan", &Plan, py::arg("forward"), py::arg("backward"), py::kw_only(),
        py::arg("algorithm") = std::string(DefaultSchedulerName()),
        py::arg("budget_bytes") = py::none(), py::arg("recompute") = true,
        py::arg("offload") = true, py::arg("wait_for_reductions") = true,
        py::arg("world_size") = 32, py::arg("latency_s") = 20e-6,
        py::arg("bandwidth_bytes_per_s") = 50e9,
        "Plans a ZeRO-3 step (both graphs, in place) under a memory budget "
        "(docs/schedule.md); returns the plan.");
}

// choose_bucket_cap: the DDP cap from a graph's device times and a link (what
// overlap.torch.ddp(bucket_cap_bytes="auto") asks).
void DefineBucketCap(py::module_& m) {
  m.def(
      "choose_bucket_cap",
      [](const Graph& g, const std::string& mode, int world_size, double latency_s,
         double bandwidth_bytes_per_s, std::optional<int64_t> first_bucket_cap_bytes,
         double backward_factor, double compute_slowdown, double busy_start_s) {
        CollectiveModel c = Collectives(world_size, latency_s, bandwidth_bytes_per_s);
        c.compute_slowdown = compute_slowdown;
        c.busy_start_s = busy_start_s;
        if (!c.Valid()) {
          Raise(absl::InvalidArgumentError(
              absl::StrCat("collective model: compute_slowdown and busy_start_s must be >= 0 "
                           "(got ",
                           compute_slowdown, " and ", busy_start_s, ")")));
        }
        const PartitionMode m = Mode(mode);
        absl::StatusOr<CapChoice> r;
        {
          py::gil_scoped_release release;
          absl::Status ok = Verify(g);
          r = ok.ok() ? ChooseBucketCap(
                            g, m, c, first_bucket_cap_bytes.value_or(kDefaultFirstBucketCapBytes),
                            backward_factor)
                      : absl::StatusOr<CapChoice>(ok);
        }
        CapChoice choice = Take(std::move(r));
        py::list candidates;
        for (const CapCandidate& k : choice.candidates) {
          py::dict d;
          d["cap_bytes"] = k.cap_bytes;
          d["buckets"] = k.buckets;
          d["backward_s"] = k.backward_s;
          d["comm_s"] = k.comm_s;
          d["exposed_s"] = k.exposed_s;
          candidates.append(d);
        }
        py::dict d;
        d["cap_bytes"] = choice.cap_bytes;
        d["candidates"] = candidates;
        return d;
      },
      py::arg("graph"), py::kw_only(), py::arg("mode") = "default", py::arg("world_size"),
      py::arg("latency_s"), py::arg("bandwidth_bytes_per_s"),
      py::arg("first_bucket_cap_bytes") = py::none(), py::arg("backward_factor") = 2.0,
      py::arg("compute_slowdown") = 0.0, py::arg("busy_start_s") = 0.0,
      "The DDP bucket cap whose backward and exposed all-reduce time end first "
      "(partition/bucket_cap.h: the graph's device times, backward = backward_factor x "
      "forward, ring all-reduces of the given latency and bus bandwidth, compute "
      "compute_slowdown slower beside them, an all-reduce started beside compute "
      "busy_start_s longer); a dict with cap_bytes and every candidate's prediction.");
}

// simulate, with its trace when asked (what overlap.torch.zero3 places its frees by).
void DefineSimulate(py::module_& m) {
  m.def(
      "simulate",
      [](const Graph& g, int world_size, double latency_s, double bandwidth_bytes_per_s,
         bool trace) {
        const CollectiveModel c = Collectives(world_size, latency_s, bandwidth_bytes_per_s);
        absl::StatusOr<SimulationResult> r;
        {
          py::gil_scoped_release release;
          absl::Status ok = Verify(g);
          SimulationOptions so;
          so.record_trace = trace;
          r = ok.ok() ? Simulator(g, c).Run(g.OrderVector(), so)
                      : absl::StatusOr<SimulationResult>(ok);
        }
        SimulationResult result = Take(std::move(r));
        py::dict d = SimulationDict(result);
        if (trace) {
          py::list events;
          for (const SimEvent& e : result.events) {
            events.append(py::make_tuple(g.node(e.node).name(), e.stream, e.start_s, e.end_s));
          }
          d["events"] = events;
          d["reached_s"] = result.reached_s;
          d["memory"] = result.memory;
        }
        return d;
      },
      py::arg("graph"), py::kw_only(), py::arg("world_size") = 32, py::arg("latency_s") = 20e-6,
      py::arg("bandwidth_bytes_per_s") = 50e9, py::arg("trace") = false,
      "Simulates the graph in its own order: peak memory, step time, exposed communication; "
      "with trace, also its events (node, stream 0 compute / 1 communication / 2 host link, "
      "start, end), the compute clock at each position (reached_s) and the bytes in use "
      "after each change (memory: time, bytes).");
}

}  // namespace
}  // namespace overlap

PYBIND11_MODULE(_overlap, m) {
  m.doc() = "overlap's C++ passes on dataflow graphs (docs/torch.md).";
  overlap::InitErrors(m);
  overlap::DefineGraph(m);
  overlap::DefinePasses(m);
  overlap::DefineBucketCap(m);
  overlap::DefineSimulate(m);
}
