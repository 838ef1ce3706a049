// The pvemuctl commands; each returns the process exit status (client/cli.h).
#ifndef PVEMU_CLIENT_COMMANDS_H_
#define PVEMU_CLIENT_COMMANDS_H_

#include "client/cli.h"

namespace pvemu::client {

// Offline (no daemon).
int RunDecode(const Args& args);
int RunValidate(const Args& args);
int RunExplain(const Args& args);   // --server: the daemon's live policy
int RunEmulate(const Args& args);
int RunImport(const Args& args);
int RunReplay(const Args& args);    // --server: through the daemon
int RunSuggest(const Args& args);
int RunMsr(const Args& args);       // search TEXT: the MSR catalog
int RunKvmFilter(const Args& args); // --server: the daemon's live policy (client/cmd_kvm.cc)
int RunXenConfig(const Args& args); // --server: the daemon's live policy (client/cmd_xen.cc)

// Online.
int RunPolicy(const Args& args);    // get | apply | set-rule | delete-rule | diff
int RunDomains(const Args& args);
int RunStats(const Args& args);
int RunWatch(const Args& args);
int RunTop(const Args& args);       // client/cmd_top.cc
int RunFleet(const Args& args);     // status | get | apply | set-rule | delete-rule (cmd_fleet.cc)

}  // namespace pvemu::client

#endif  // PVEMU_CLIENT_COMMANDS_H_
