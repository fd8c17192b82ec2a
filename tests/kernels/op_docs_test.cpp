// Every op of the op list (kernels/op_list.h) has its row in docs/ops.md: its kName appears
// there as a whole word (the function of the same name, or "op `name`" in a row).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "kernels/op_list.h"

namespace tessera {
namespace {

TEST(OpDocs, EveryListedOpHasARowInTheOpsDoc) {
  std::ifstream in(TESSERA_OPS_DOC);
  ASSERT_TRUE(in) << "cannot read " << TESSERA_OPS_DOC;
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  ASSERT_GT(op_names().size(), 50u);
  for (const std::string& name : op_names())
    EXPECT_TRUE(std::regex_search(doc, std::regex("(^|[^a-z0-9_])" + name + "([^a-z0-9_]|$)")))
        << "op '" << name << "' (kernels/op_list.h) has no row in docs/ops.md";
}

// The check can fail: a name that is no op is not found.
TEST(OpDocs, AMissingNameIsFound) {
  std::ifstream in(TESSERA_OPS_DOC);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_FALSE(std::regex_search(text.str(), std::regex("(^|[^a-z0-9_])no_such_op_zz([^a-z0-9_]|$)")));
}

}  // namespace
}  // namespace tessera
