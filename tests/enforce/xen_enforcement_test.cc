// What explain says Xen lets pvemud carry out (enforce/xen_enforcement.h):
// enforced exactly for what the daemon monitors, advisory otherwise, with the
// flags that would change it.
#include "enforce/xen_enforcement.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pvemu::enforce {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

XenMonitoring Monitoring() {
  return XenMonitoring{{4}, {0x174}, {{0x510, 0x513}, {0x520, 0x520}}};
}

TEST(XenEnforcementTest, ReadsAreAlwaysAdvisoryBecauseXenHasNoReadEvent) {
  EXPECT_THAT(XenMsrNote(Monitoring(), 4, 0x174, false),
              AllOf(StartsWith("advisory on Xen"), HasSubstr("no event for RDMSR")));
}

TEST(XenEnforcementTest, MonitoredWriteOfAMonitoredDomainIsEnforced) {
  EXPECT_THAT(XenMsrNote(Monitoring(), 4, 0x174, true),
              AllOf(StartsWith("enforced on Xen"), HasSubstr("0x174")));
}

TEST(XenEnforcementTest, UnmonitoredWriteSaysWhichFlagsWouldDecideIt) {
  EXPECT_THAT(XenMsrNote(Monitoring(), 4, 0x1b0, true),
              AllOf(StartsWith("advisory on Xen"), HasSubstr("writes of 0x1b0"),
                    HasSubstr("--monitor-domain=4 --monitor-msrs=0x1b0")));
  EXPECT_THAT(XenMsrNote(Monitoring(), 9, 0x174, true),
              AllOf(StartsWith("advisory on Xen"), HasSubstr("domain 9")));
}

TEST(XenEnforcementTest, ClaimedPortIsEnforcedButXensOwnDevicesComeFirst) {
  EXPECT_THAT(XenPortNote(Monitoring(), 4, 0x510, 4),
              AllOf(StartsWith("enforced on Xen"), HasSubstr("ioreq server"),
                    HasSubstr("Xen emulates that port itself")));
  EXPECT_THAT(XenPortNote(Monitoring(), 4, 0x520, 1), StartsWith("enforced on Xen"));
}

TEST(XenEnforcementTest, PortOutsideTheClaimOrDomainIsAdvisory) {
  // 0x512 + 4 bytes runs past 0x513: not all of it is claimed.
  EXPECT_THAT(XenPortNote(Monitoring(), 4, 0x512, 4), StartsWith("advisory on Xen"));
  EXPECT_THAT(XenPortNote(Monitoring(), 4, 0x3f8, 1),
              AllOf(StartsWith("advisory on Xen"), HasSubstr("no event for I/O instructions"),
                    HasSubstr("--monitor-domain=4 --monitor-ports=0x3f8")));
  EXPECT_THAT(XenPortNote(Monitoring(), 5, 0x510, 1), StartsWith("advisory on Xen"));
}

}  // namespace
}  // namespace pvemu::enforce
