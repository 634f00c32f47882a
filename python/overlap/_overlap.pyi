"""Type stubs of overlap's C++ extension (python/overlap_module.cc; docs/torch.md)."""

from typing import NotRequired, Optional, TypedDict


class Error(RuntimeError):
    """A failed call; `code` is the absl status code's name ("INVALID_ARGUMENT")."""
    code: str


class InvalidArgumentError(Error, ValueError): ...
class NotFoundError(Error, LookupError): ...
class UnimplementedError(Error, NotImplementedError): ...
class FailedPreconditionError(Error): ...
class OutOfRangeError(Error, ValueError): ...
class ResourceExhaustedError(Error): ...
class DeadlineExceededError(Error, TimeoutError): ...
class UnavailableError(Error, ConnectionError): ...
class AbortedError(Error): ...
class InternalError(Error): ...


class Graph:
    """A dataflow graph (docs/format.md), held in C++."""
    @staticmethod
    def from_json(text: str) -> Graph: ...
    def to_json(self) -> str: ...
    def copy(self) -> Graph: ...
    @property
    def name(self) -> str: ...
    def node_names(self) -> list[str]: ...
    def param_names(self) -> list[str]: ...
    def __len__(self) -> int: ...


class AnnotateReport(TypedDict):
    device_times_filled: int
    tensor_sizes_filled: int
    by_formula: int
    fallback: int
    fallback_ops: dict[str, int]
    total_device_time: float


class Bucket(TypedDict):
    index: int
    size_bytes: int
    params: list[str]
    nodes: list[str]
    bytes_by_dtype: dict[str, int]


class CapCandidate(TypedDict):
    cap_bytes: int
    buckets: int
    backward_s: float
    comm_s: float
    exposed_s: float


class CapChoice(TypedDict):
    cap_bytes: int
    candidates: list[CapCandidate]


class SchedulerInfo(TypedDict):
    name: str
    description: str
    honours_budget: bool


class Simulation(TypedDict):
    peak_memory_bytes: int
    peak_gathered_bytes: int
    step_time_s: float
    compute_s: float
    comm_s: float
    host_s: float
    exposed_comm_s: float
    lower_bound_s: float
    events: NotRequired[list[tuple[str, int, float, float]]]  # simulate(trace=True)
    reached_s: NotRequired[list[float]]  # simulate(trace=True)
    memory: NotRequired[list[tuple[float, int]]]  # simulate(trace=True): (time, bytes)


class ScheduleReport(TypedDict):
    algorithm: str
    order: list[str]
    simulation: Simulation
    scheduler_s: float


class StepFigures(TypedDict):
    peak_memory_bytes: int
    forward_peak_bytes: int
    backward_peak_bytes: int
    resident_bytes: int
    residents: int
    step_time_s: float
    forward_time_s: float
    backward_time_s: float
    compute_s: float
    comm_s: float
    host_s: float
    exposed_comm_s: float


class StepPlan(TypedDict):
    algorithm: str
    fits: bool
    min_feasible_bytes: int
    resident: list[int]
    reduce_bucket_bytes: int
    forward_lookahead: int
    backward_lookahead: int
    reduce_waits: int
    recomputed: int
    offloaded: int
    figures: StepFigures
    forward: Simulation
    backward: Simulation


def verify(graph: Graph) -> None: ...
def annotate(graph: Graph, *, overwrite: bool = ...,
             peak_flops_32bit: Optional[float] = ..., peak_flops_16bit: Optional[float] = ...,
             memory_bandwidth: Optional[float] = ...) -> AnnotateReport: ...
def choose_bucket_cap(graph: Graph, *, mode: str = ..., world_size: int,
                      latency_s: float, bandwidth_bytes_per_s: float,
                      first_bucket_cap_bytes: Optional[int] = ...,
                      backward_factor: float = ..., compute_slowdown: float = ...,
                      busy_start_s: float = ...) -> CapChoice: ...
def partition(graph: Graph, *, bucket_cap_bytes: int = ...,
              first_bucket_cap_bytes: Optional[int] = ...,
              mode: str = ...) -> list[Bucket]: ...
def insert_zero3(graph: Graph, *, kind: str = ...) -> bool: ...
def schedulers() -> list[SchedulerInfo]: ...
def schedule(graph: Graph, *, algorithm: str = ..., budget_bytes: Optional[int] = ...,
             keep_residents: bool = ..., world_size: int = ..., latency_s: float = ...,
             bandwidth_bytes_per_s: float = ...) -> ScheduleReport: ...
def plan(forward: Graph, backward: Graph, *, algorithm: str = ...,
         budget_bytes: Optional[int] = ..., recompute: bool = ..., offload: bool = ...,
         wait_for_reductions: bool = ..., world_size: int = ..., latency_s: float = ...,
         bandwidth_bytes_per_s: float = ...) -> StepPlan: ...
def simulate(graph: Graph, *, world_size: int = ..., latency_s: float = ...,
             bandwidth_bytes_per_s: float = ..., trace: bool = ...) -> Simulation: ...
