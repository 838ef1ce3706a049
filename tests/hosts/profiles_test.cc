// The host profiles shipped beside the sim host: embedded copies equal the
// files, and each describes the CPU its name says.
#include "hosts/profiles.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/textproto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pvemu/v1/host.pb.h"
#include "tests/status_matchers.h"
#include "x86/msr_catalog.h"

namespace pvemu::hosts {
namespace {

using ::pvemu::testing::IsOk;
using ::testing::UnorderedElementsAre;

std::string ReadSource(const std::string& rel) {
  const char* root = std::getenv("PVEMU_SOURCE_ROOT");
  std::ifstream in(std::string(root ? root : ".") + "/" + rel);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ShippedProfiles, Names) {
  EXPECT_THAT(ShippedProfileNames(), UnorderedElementsAre("intel-xeon-e-2136", "amd-epyc-7443p"));
  EXPECT_EQ(ShippedProfile("nope"), "");
}

TEST(ShippedProfiles, ParseAndNameCatalogMsrs) {
  struct Expect {
    const char* name;
    v1::Vendor vendor;
    uint32_t family, model, stepping, cpus;
  } expect[] = {{"intel-xeon-e-2136", v1::INTEL, 6, 0x9e, 10, 12},
                {"amd-epyc-7443p", v1::AMD, 0x19, 0x01, 1, 48}};
  for (const Expect& e : expect) {
    SCOPED_TRACE(e.name);
    std::string file = "hosts/profiles/" + std::string(e.name) + ".textproto";
    EXPECT_EQ(ShippedProfile(e.name), ReadSource(file));
    v1::HostProfile p;
    ASSERT_THAT(ParseTextProto(ShippedProfile(e.name), file, &p), IsOk());
    EXPECT_EQ(p.vendor(), e.vendor);
    EXPECT_EQ(p.family(), e.family);
    EXPECT_EQ(p.model(), e.model);
    EXPECT_EQ(p.stepping(), e.stepping);
    EXPECT_EQ(p.cpus(), e.cpus);
    EXPECT_GT(p.tsc_khz(), 0u);
    bool has_19a = false;
    for (const auto& m : p.msr()) {
      absl::StatusOr<uint32_t> idx = x86::ParseMsr(m.msr());
      ASSERT_THAT(idx, IsOk());
      if (*idx == 0x19a || *idx == 0x1b0) {
        has_19a = true;
        EXPECT_EQ(m.faults(), e.vendor != v1::INTEL) << m.msr();
      }
    }
    EXPECT_TRUE(has_19a);
    bool leaf0 = false;
    for (const auto& c : p.cpuid()) {
      if (c.leaf() != 0) continue;
      leaf0 = true;
      std::string id;
      for (uint32_t r : {c.regs().ebx(), c.regs().edx(), c.regs().ecx()}) {
        for (int i = 0; i < 4; ++i) id.push_back(static_cast<char>(r >> (8 * i)));
      }
      EXPECT_EQ(id, e.vendor == v1::INTEL ? "GenuineIntel" : "AuthenticAMD");
    }
    EXPECT_TRUE(leaf0);
  }
}

}  // namespace
}  // namespace pvemu::hosts
