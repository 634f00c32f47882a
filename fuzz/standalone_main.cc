// main() for fuzz targets built without libFuzzer: runs the target once on each file named
// on the command line, so a crash found by a campaign reproduces under gdb or plain ASan:
//   bazel run //fuzz:json_reader_fuzzer -- /path/to/crash-1234
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot open %s\n", argv[i]);
      return 2;
    }
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    std::fprintf(stderr, "ran %s (%zu bytes): ok\n", argv[i], bytes.size());
  }
  return 0;
}
