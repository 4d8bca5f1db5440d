// API keys and tenants: the key file's checks, authentication, class permissions and the
// per-tenant request rate (a token bucket on a given clock).
#include <gtest/gtest.h>

#include "core/error.h"
#include "server/tenants.h"

namespace mmrt::server {
namespace {

const engine::SlaConfig kSla = engine::SlaConfig::defaults();

std::unique_ptr<Tenants> load(const std::string& json) {
  return Tenants::from_json(json, "keys.json", kSla);
}

TEST(Tenants, OpenServerHasOneTenant) {
  Tenants open;
  EXPECT_TRUE(open.open());
  const Tenant* t = open.authenticate(nullptr);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->name, "default");
  EXPECT_TRUE(Tenants::allows(*t, "platinum"));
}

TEST(Tenants, KeysNameTenantsAndTheirClasses) {
  auto t = load(R"({"keys":[
    {"key":"sk-acme-0001","tenant":"acme","classes":["gold","silver"]},
    {"key":"sk-acme-0002","tenant":"acme","classes":["gold","silver"]},
    {"key":"sk-free-0001","tenant":"free","classes":["platinum","gold"],"default_class":"gold",
     "requests_per_second":2}]})");
  EXPECT_FALSE(t->open());
  EXPECT_EQ(t->authenticate(nullptr), nullptr);
  const std::string bad = "Bearer sk-nope-0000", basic = "Basic sk-acme-0001";
  EXPECT_EQ(t->authenticate(&bad), nullptr);
  EXPECT_EQ(t->authenticate(&basic), nullptr);
  const std::string a1 = "Bearer sk-acme-0001", a2 = "Bearer sk-acme-0002",
                    f = "Bearer sk-free-0001";
  const Tenant* acme = t->authenticate(&a1);
  ASSERT_NE(acme, nullptr);
  EXPECT_EQ(acme->name, "acme");
  EXPECT_EQ(t->authenticate(&a2), acme);
  EXPECT_TRUE(Tenants::allows(*acme, "gold"));
  EXPECT_FALSE(Tenants::allows(*acme, "platinum"));
  EXPECT_EQ(acme->default_class, "") << "the configured default (silver) is allowed";
  const Tenant* free = t->authenticate(&f);
  ASSERT_NE(free, nullptr);
  EXPECT_EQ(free->default_class, "gold");
  EXPECT_EQ(free->max_prompt_tokens, 0) << "the server's default";
  auto c =
      load(R"({"keys":[{"key":"sk-cap-00001","tenant":"c","max_prompt_tokens_in_flight":64}]})");
  const std::string ck = "Bearer sk-cap-00001";
  EXPECT_EQ(c->authenticate(&ck)->max_prompt_tokens, 64);
  // A tenant whose classes exclude the configured default gets its first class.
  auto u = load(R"({"keys":[{"key":"sk-plat-0001","tenant":"p","classes":["platinum"]}]})");
  const std::string p = "Bearer sk-plat-0001";
  EXPECT_EQ(u->authenticate(&p)->default_class, "platinum");
}

TEST(Tenants, MalformedKeyFilesAreRefusedNamingTheField) {
  auto fails = [](const std::string& json, const std::string& what) {
    try {
      load(json);
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "accepted " << json;
  };
  fails(R"({})", "\"keys\"");
  fails(R"({"keys":[{"key":"short","tenant":"a"}]})", "keys[0].key");
  fails(R"({"keys":[{"key":"sk-00000001"}]})", "keys[0].tenant");
  fails(R"({"keys":[{"key":"sk-00000001","tenant":"a","classes":["diamond"]}]})", "classes");
  fails(
      R"({"keys":[{"key":"sk-00000001","tenant":"a","classes":["gold"],"default_class":"silver"}]})",
      "default_class");
  fails(R"({"keys":[{"key":"sk-00000001","tenant":"a","requests_per_second":-1}]})",
        "requests_per_second");
  fails(R"({"keys":[{"key":"sk-00000001","tenant":"a"},{"key":"sk-00000001","tenant":"b"}]})",
        "twice");
  fails(R"({"keys":[{"key":"sk-00000001","tenant":"a","max_prompt_tokens_in_flight":-5}]})",
        "max_prompt_tokens_in_flight");
  fails(R"({"keys":[{"key":"sk-00000001","tenant":"a","max_prompt_tokens_in_flight":1.5}]})",
        "max_prompt_tokens_in_flight");
  fails(R"({"keys":[{"key":"sk-00000001","tenant":"a"},{"key":"sk-00000002","tenant":"a",)"
        R"("requests_per_second":3}]})",
        "different settings");
}

TEST(Tenants, RateIsATokenBucket) {
  auto t = load(R"({"keys":[{"key":"sk-rate-0001","tenant":"r","requests_per_second":2}]})");
  const std::string k = "Bearer sk-rate-0001";
  const Tenant& r = *t->authenticate(&k);
  double wait = 0;
  const int64_t s = 1'000'000'000;
  EXPECT_TRUE(t->admit_rate(r, 10 * s, wait));  // a burst of 2
  EXPECT_TRUE(t->admit_rate(r, 10 * s, wait));
  EXPECT_FALSE(t->admit_rate(r, 10 * s, wait));
  EXPECT_NEAR(wait, 0.5, 1e-9);
  EXPECT_FALSE(t->admit_rate(r, 10 * s + s / 4, wait));  // half a token back
  EXPECT_NEAR(wait, 0.25, 1e-9);
  EXPECT_TRUE(t->admit_rate(r, 10 * s + s / 2, wait));
}

}  // namespace
}  // namespace mmrt::server
