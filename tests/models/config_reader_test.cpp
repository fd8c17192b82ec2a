#include <gtest/gtest.h>

#include "gradcheck.h"
#include "models/config_reader.h"

namespace tessera {
namespace {

TEST(ConfigReader, ReadsDefaultsAndNamesBadFields) {
  nlohmann::json j = nlohmann::json::parse(R"({"layers": 3, "dropout": 0.1, "tied": true, "name": "x"})");
  models::ConfigReader r(j, "Model");
  EXPECT_EQ(r.get<int64_t>("layers", 1), 3);
  EXPECT_EQ(r.get<int64_t>("heads", 4), 4);
  EXPECT_DOUBLE_EQ(r.get<double>("dropout", 0.0), 0.1);
  EXPECT_TRUE(r.get<bool>("tied", false));
  EXPECT_EQ(r.require<std::string>("name"), "x");
  r.finish();
  testing::expect_error<ValueError>([&] { r.check(false, "layers", "must be even"); },
                                    {"Model config", "\"layers\"", "must be even", "got 3"});
  testing::expect_error<ValueError>([&] { r.require<int64_t>("vocab"); }, {"\"vocab\"", "required"});
  testing::expect_error<ValueError>([&] { r.get<int64_t>("dropout", 0); }, {"\"dropout\"", "wrong type"});
  nlohmann::json typo = nlohmann::json::parse(R"({"layer": 3})");
  models::ConfigReader t(typo, "Model");
  t.get<int64_t>("layers", 1);
  testing::expect_error<ValueError>([&] { t.finish(); }, {"unknown field \"layer\""});
  testing::expect_error<ValueError>([] { models::ConfigReader(nlohmann::json::array(), "Model"); }, {"JSON object"});
}

}  // namespace
}  // namespace tessera
