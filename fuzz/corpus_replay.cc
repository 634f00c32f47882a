// GoogleTest driver that replays a fuzz corpus: one test case per file of the directory
// given as the first argument, each running LLVMFuzzerTestOneInput on the file's bytes.
// A target signals a finding by aborting, so a failing file fails the test run loudly.
#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::string> ListFiles(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") files.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

class CorpusFile : public ::testing::Test {
 public:
  explicit CorpusFile(std::string path) : path_(std::move(path)) {}
  void TestBody() override {
    std::ifstream in(path_, std::ios::binary);
    ASSERT_TRUE(in) << "cannot open " << path_;
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
              0);
  }

 private:
  std::string path_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::vector<std::string> files = ListFiles(argv[1]);
  if (files.empty()) {
    std::fprintf(stderr, "corpus %s is empty or missing\n", argv[1]);
    return 1;
  }
  for (const std::string& f : files) {
    std::string name = f.substr(f.rfind('/') + 1);
    ::testing::RegisterTest("CorpusReplay", name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [f]() -> ::testing::Test* { return new CorpusFile(f); });
  }
  return RUN_ALL_TESTS();
}
