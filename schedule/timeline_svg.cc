#include "schedule/timeline_svg.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/size.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

// Geometry (pixels).
constexpr double kLeft = 115, kRight = 30, kTop = 40;
constexpr double kLaneHeight = 26, kLaneGap = 8;
constexpr double kMemoryHeight = 220;
constexpr double kBottom = 50;

void AppendXmlText(std::string* out, absl::string_view s) {
  for (char c : s) {
    switch (c) {
      case '&':
        out->append("&amp;");
        break;
      case '<':
        out->append("&lt;");
        break;
      case '>':
        out->append("&gt;");
        break;
      case '"':
        out->append("&quot;");
        break;
      default:
        // XML 1.0 forbids most control characters, even escaped.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out->push_back('?');
        } else {
          out->push_back(c);
        }
    }
  }
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `ticks` ticks over `span`.
double TickStep(double span, int ticks) {
  if (!(span > 0)) return 1;
  const double raw = span / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

enum BarKind { kComputeBar, kAllgatherBar, kReduceBar, kRecomputeBar, kOffloadBar, kReloadBar };
constexpr const char* kBarColor[] = {"#4e79a7", "#59a14f", "#f28e2b",
                                     "#edc948", "#b07aa1", "#76b7b2"};
constexpr const char* kBarName[] = {"compute",   "allgather", "reduce-scatter",
                                    "recompute", "offload",   "reload"};

struct Bar {
  double x0, x1;
  BarKind kind;
  int members;
  size_t first;  // the first merged bar's index in Picture::bars
};

// What a picture draws, whatever it came from: bars on the two lanes in time order per lane,
// the memory curve, the figures, and marks (a time with a label: the forward / backward
// boundary).
struct PictureBar {
  double start, end;
  int lane;  // 0 compute, 1 communication, 2 the host link
  BarKind kind;
  std::string name;
};
struct Mark {
  double t;
  std::string label;
};
struct Picture {
  std::vector<PictureBar> bars;
  std::vector<std::pair<double, int64_t>> memory;
  double step_time_s = 0;
  int64_t peak_memory_bytes = 0;
  double exposed_comm_s = 0;
  std::vector<Mark> marks;
  int64_t resident_bytes = 0;  // drawn as a band at the bottom of the memory plot
};

// The bars of one simulation, starting at `offset` seconds.
void AddBars(const Graph& g, const SimulationResult& r, double offset, Picture* p) {
  for (const SimEvent& e : r.events) {
    const Node& n = g.node(e.node);
    BarKind kind = kAllgatherBar;
    if (e.stream == 0) {
      kind = absl::StrContains(n.name(), "__recomputed") ? kRecomputeBar : kComputeBar;
    } else if (e.stream == 2) {
      kind = IsOffload(n) ? kOffloadBar : kReloadBar;
    } else if (IsReduce(n)) {
      kind = kReduceBar;
    }
    p->bars.push_back({offset + e.start_s, offset + e.end_s, e.stream, kind, n.name()});
  }
}

// The picture's geometry: where a time and a byte count land, in pixels.
struct Frame {
  int lanes = 2;
  double width = 0;
  double memory_top = 0;
  double total_w = 0;
  double total_h = 0;
  double t_end = 0;
  int64_t top_bytes = 0;
  double y_scale = 0;

  double x_of(double t) const { return kLeft + width * std::clamp(t / t_end, 0.0, 1.0); }
  double y_of(int64_t bytes) const {
    return memory_top + kMemoryHeight - y_scale * static_cast<double>(bytes);
  }
};

// A third lane for the host link when anything moves over it; the top of the memory plot
// holds the peak and the budget.
Frame FrameOf(const Picture& r, const TimelineSvgOptions& options) {
  Frame f;
  for (const PictureBar& b : r.bars) f.lanes = std::max(f.lanes, b.lane + 1);
  f.memory_top = kTop + f.lanes * (kLaneHeight + kLaneGap) + 30;
  f.width = std::max(100, options.width_px);
  f.total_w = kLeft + f.width + kRight;
  f.total_h = f.memory_top + kMemoryHeight + kBottom;
  f.t_end = r.step_time_s > 0 ? r.step_time_s : 1e-9;
  f.top_bytes = std::max<int64_t>(r.peak_memory_bytes, 1);
  if (options.budget_bytes) f.top_bytes = std::max(f.top_bytes, *options.budget_bytes);
  f.y_scale = kMemoryHeight / (1.05 * static_cast<double>(f.top_bytes));
  return f;
}

// The SVG header, the title and the figures line.
void DrawHeader(const Picture& r, const TimelineSvgOptions& options, const Frame& f,
                std::string& out) {
  out = absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
      "width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      f.total_w, f.total_h, f.total_w, f.total_h);
  if (!options.title.empty()) {
    out.append("<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">");
    AppendXmlText(&out, options.title);
    out.append("</text>\n");
  }
  absl::StrAppendFormat(&out,
                        "<text x=\"%.0f\" y=\"20\" text-anchor=\"end\">step %s, peak memory %s, "
                        "exposed communication %s</text>\n",
                        f.total_w - kRight, FormatSeconds(r.step_time_s),
                        FormatBytes(r.peak_memory_bytes), FormatSeconds(r.exposed_comm_s));
}

// One lane: its bars merged per kind while less than half a pixel apart.
void DrawLane(const Picture& r, const Frame& f, int lane, std::string& out) {
  const char* lane_name[3] = {"compute", "communication", "host link"};
  const double y = kTop + lane * (kLaneHeight + kLaneGap);
  absl::StrAppendFormat(&out,
                        "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n"
                        "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" "
                        "fill=\"#f4f4f4\"/>\n",
                        kLeft - 8, y + kLaneHeight / 2 + 4, lane_name[lane], kLeft, y, f.width,
                        kLaneHeight);
  std::vector<Bar> bars;
  for (size_t k = 0; k < r.bars.size(); ++k) {
    const PictureBar& e = r.bars[k];
    if (e.lane != lane) continue;
    const double x0 = f.x_of(e.start), x1 = f.x_of(e.end);
    if (!bars.empty() && bars.back().kind == e.kind && x0 - bars.back().x1 < 0.5) {
      bars.back().x1 = std::max(bars.back().x1, x1);
      ++bars.back().members;
      continue;
    }
    bars.push_back({x0, x1, e.kind, 1, k});
  }
  for (const Bar& b : bars) {
    absl::StrAppendFormat(&out,
                          "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" "
                          "fill=\"%s\"><title>",
                          b.x0, y + 2, std::max(b.x1 - b.x0, 0.5), kLaneHeight - 4,
                          kBarColor[b.kind]);
    if (b.members == 1) {
      AppendXmlText(&out, r.bars[b.first].name);
    } else {
      absl::StrAppend(&out, b.members, " nodes from ");
      AppendXmlText(&out, r.bars[b.first].name);
    }
    out.append("</title></rect>\n");
  }
}

// The legend names the kinds drawn (the first three always).
void DrawLegend(const Picture& r, const Frame& f, std::string& out) {
  bool drawn[6] = {true, true, true, false, false, false};
  for (const PictureBar& b : r.bars) drawn[b.kind] = true;
  int shown = 0;
  for (int i = 0; i < 6; ++i) {
    if (!drawn[i]) continue;
    const double x = kLeft + shown++ * 130;
    const double y = kTop + f.lanes * (kLaneHeight + kLaneGap) + 4;
    absl::StrAppendFormat(&out,
                          "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                          "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                          x, y, kBarColor[i], x + 16, y + 10, kBarName[i]);
  }
}

// The memory axis with its ticks, and the time axis with its.
void DrawAxes(const Frame& f, std::string& out) {
  absl::StrAppendFormat(
      &out,
      "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">memory</text>\n"
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n",
      kLeft - 8, f.memory_top - 8, kLeft, f.memory_top, kLeft, f.memory_top + kMemoryHeight);
  // Ticks at round multiples of the largest binary unit (B, KiB, MiB, GiB, ...) below the top.
  double unit = 1;
  while (unit * 1024 <= static_cast<double>(f.top_bytes)) unit *= 1024;
  const double byte_step = unit * TickStep(1.05 * static_cast<double>(f.top_bytes) / unit, 5);
  for (double b = 0; b <= 1.05 * static_cast<double>(f.top_bytes); b += byte_step) {
    const double y = f.y_of(static_cast<int64_t>(b));
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" "
                          "stroke=\"#dddddd\"/><text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" "
                          "font-size=\"10\">%s</text>\n",
                          kLeft, y, kLeft + f.width, y, kLeft - 4, y + 3,
                          FormatBytes(static_cast<int64_t>(b)));
  }
  const double t_step = TickStep(f.t_end, 8);
  const double axis_y = f.memory_top + kMemoryHeight;
  absl::StrAppendFormat(
      &out, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", kLeft,
      axis_y, kLeft + f.width, axis_y);
  for (double t = 0; t <= f.t_end * (1 + 1e-9); t += t_step) {
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"black\"/>"
                          "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" font-size=\"10\">%s"
                          "</text>\n",
                          f.x_of(t), axis_y, f.x_of(t), axis_y + 4, f.x_of(t), axis_y + 16,
                          FormatSeconds(t));
  }
  absl::StrAppendFormat(&out, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">time</text>\n",
                        kLeft + f.width / 2, axis_y + 34);
}

// The curve as a step line, each pixel column reduced to first / min / max / last, and the
// peak marked at its first instant.
void DrawMemoryCurve(const Picture& r, const Frame& f, std::string& out) {
  std::string points = absl::StrFormat("%.2f,%.2f", f.x_of(0), f.y_of(0));
  int64_t held = 0;
  size_t i = 0;
  while (i < r.memory.size()) {
    const double column = std::floor(f.x_of(r.memory[i].first));
    int64_t lo = r.memory[i].second, hi = lo;
    size_t j = i;
    for (; j < r.memory.size() && std::floor(f.x_of(r.memory[j].first)) == column; ++j) {
      lo = std::min(lo, r.memory[j].second);
      hi = std::max(hi, r.memory[j].second);
    }
    const double x = f.x_of(r.memory[i].first);
    const int64_t last = r.memory[j - 1].second;
    absl::StrAppendFormat(&points, " %.2f,%.2f %.2f,%.2f %.2f,%.2f %.2f,%.2f", x, f.y_of(held), x,
                          f.y_of(lo), x, f.y_of(hi), x, f.y_of(last));
    held = last;
    i = j;
  }
  absl::StrAppendFormat(&points, " %.2f,%.2f", f.x_of(f.t_end), f.y_of(held));
  absl::StrAppendFormat(&out,
                        "<polyline fill=\"none\" stroke=\"#e15759\" stroke-width=\"1.5\" "
                        "points=\"%s\"/>\n",
                        points);
  for (const auto& [t, bytes] : r.memory) {
    if (bytes != r.peak_memory_bytes) continue;
    absl::StrAppendFormat(&out,
                          "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"4\" fill=\"#e15759\"/>"
                          "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\">peak %s</text>\n",
                          f.x_of(t), f.y_of(bytes), f.x_of(t) + 6, f.y_of(bytes) - 6,
                          FormatBytes(bytes));
    break;
  }
}

// The budget line, the resident parameters' band and the marks.
void DrawAnnotations(const Picture& r, const TimelineSvgOptions& options, const Frame& f,
                     std::string& out) {
  if (options.budget_bytes) {
    const double y = f.y_of(*options.budget_bytes);
    absl::StrAppendFormat(
        &out,
        "<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"#333333\" "
        "stroke-dasharray=\"6,4\"/><text x=\"%.0f\" y=\"%.2f\" "
        "text-anchor=\"end\" font-size=\"11\">budget %s</text>\n",
        kLeft, y, kLeft + f.width, y, kLeft + f.width, y - 4, FormatBytes(*options.budget_bytes));
  }
  if (r.resident_bytes > 0) {
    const double y = f.y_of(r.resident_bytes);
    absl::StrAppendFormat(&out,
                          "<rect x=\"%.0f\" y=\"%.2f\" width=\"%.0f\" height=\"%.2f\" "
                          "fill=\"#59a14f\" fill-opacity=\"0.25\"/><text x=\"%.0f\" "
                          "y=\"%.2f\" font-size=\"11\">resident parameters %s</text>\n",
                          kLeft, y, f.width, f.memory_top + kMemoryHeight - y, kLeft + 4, y - 4,
                          FormatBytes(r.resident_bytes));
  }
  for (const Mark& m : r.marks) {
    const double x = f.x_of(m.t);
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" "
                          "stroke=\"#333333\" stroke-dasharray=\"3,3\"/><text x=\"%.2f\" "
                          "y=\"%.0f\" text-anchor=\"middle\" font-size=\"11\">",
                          x, kTop - 6, x, f.memory_top + kMemoryHeight, x, kTop - 10);
    AppendXmlText(&out, m.label);
    out.append("</text>\n");
  }
}

std::string Draw(const Picture& r, const TimelineSvgOptions& options) {
  const Frame f = FrameOf(r, options);
  std::string out;
  DrawHeader(r, options, f, out);
  for (int lane = 0; lane < f.lanes; ++lane) DrawLane(r, f, lane, out);
  DrawLegend(r, f, out);
  DrawAxes(f, out);
  DrawMemoryCurve(r, f, out);
  DrawAnnotations(r, options, f, out);
  out.append("</svg>\n");
  return out;
}

}  // namespace

std::string TimelineSvg(const Graph& g, const SimulationResult& r,
                        const TimelineSvgOptions& options) {
  Picture p;
  AddBars(g, r, 0, &p);
  p.memory = r.memory;
  p.step_time_s = r.step_time_s;
  p.peak_memory_bytes = r.peak_memory_bytes;
  p.exposed_comm_s = r.exposed_comm_s;
  return Draw(p, options);
}

std::string StepTimelineSvg(const Graph& forward, const Graph& backward, const StepSimulation& s,
                            const TimelineSvgOptions& options) {
  const StepFigures& x = s.figures;
  Picture p;
  AddBars(forward, s.forward, 0, &p);
  AddBars(backward, s.backward, x.forward_time_s, &p);
  // Each graph's curve with the residents only the other graph gathers added.
  const int64_t add_f = x.forward_peak_bytes - s.forward.peak_memory_bytes;
  const int64_t add_b = x.backward_peak_bytes - s.backward.peak_memory_bytes;
  for (const auto& [t, bytes] : s.forward.memory) p.memory.push_back({t, bytes + add_f});
  for (const auto& [t, bytes] : s.backward.memory) {
    p.memory.push_back({x.forward_time_s + t, bytes + add_b});
  }
  p.step_time_s = x.step_time_s;
  p.peak_memory_bytes = x.peak_memory_bytes;
  p.exposed_comm_s = x.exposed_comm_s;
  p.marks.push_back({x.forward_time_s, "forward | backward"});
  p.resident_bytes = x.resident_bytes;
  return Draw(p, options);
}

}  // namespace overlap
