#include "client/commands.h"
namespace pvemu::client {
int RunValidate(const Args&) { return UsageError("validate: not built yet"); }
int RunExplain(const Args&) { return UsageError("explain: not built yet"); }
int RunEmulate(const Args&) { return UsageError("emulate: not built yet"); }
int RunImport(const Args&) { return UsageError("import: not built yet"); }
int RunReplay(const Args&) { return UsageError("replay: not built yet"); }
int RunSuggest(const Args&) { return UsageError("suggest: not built yet"); }
}
