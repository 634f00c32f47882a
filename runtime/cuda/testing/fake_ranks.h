// Ranks on emulated devices (testonly): each rank gets its own FakeGpuApi, a CudaDevice on it
// and a communicator, and runs `body`, which returns "" when the rank is fine or what went
// wrong.
#ifndef OVERLAP_RUNTIME_CUDA_TESTING_FAKE_RANKS_H_
#define OVERLAP_RUNTIME_CUDA_TESTING_FAKE_RANKS_H_

#include <functional>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/fake_gpu_api.h"

namespace overlap {

using FakeRankBody =
    std::function<std::string(int rank, FakeGpuApi& api, CudaDevice& dev, Communicator& comm)>;

// Ranks as threads sharing one fake NCCL world and an in-process TCP store; each rank's
// communicator is an NcclCommunicator on its device's streams (ordered after its compute
// stream), shut down after `body`. One string per rank.
std::vector<std::string> RunFakeNcclRanks(int size, const FakeRankBody& body);

// Ranks as forked processes with Gloo communicators (collectives staged through the host),
// through a fresh store folder named after `name`. One exit code per rank (0: body returned
// "").
std::vector<int> RunFakeGlooRanks(int size, const std::string& name, const FakeRankBody& body);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CUDA_TESTING_FAKE_RANKS_H_
