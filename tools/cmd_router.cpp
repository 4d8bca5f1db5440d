// `mmrt router`: the OpenAI API in front of the workers registered in etcd.
#include <string>

#include "cli.h"
#include "cluster/router.h"

namespace mmrt::cli {
namespace {

int run_router(Args& args) {
  cluster::RouterConfig cfg;
  cfg.etcd = args.require("etcd");
  cfg.model = args.require("served-model-name");
  cfg.prefix = args.get_or("cluster-prefix", cfg.prefix);
  cfg.http.host = args.get_or("host", "127.0.0.1");
  cfg.http.port = static_cast<int>(args.get_int("port", 8080, 0, 65535));
  cfg.http.threads = static_cast<int>(args.get_int("http-threads", 2, 1, 64));
  cfg.http.body_limit = static_cast<size_t>(args.get_int("max-body-mb", 64, 1, 4096)) << 20;
  cfg.http.max_connections = static_cast<int>(args.get_int("max-connections", 4096, 1, 1 << 20));
  cfg.max_in_flight = args.get_int("max-requests", 1024, 1, 1 << 16);
  cfg.poll = std::chrono::milliseconds(args.get_int("poll-ms", 200, 10, 60000));
  cfg.connect_timeout =
      std::chrono::milliseconds(args.get_int("connect-timeout-ms", 1000, 1, 60000));
  cfg.drain_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(args.get_double("drain-timeout", 10, 0, 3600) * 1000));
  cfg.nats = args.get_or("nats", "");
  cfg.balance_abs = args.get_int("balance-abs", cfg.balance_abs, 0, 1 << 20);
  cfg.balance_rel = args.get_double("balance-rel", cfg.balance_rel, 1, 1000);
  cfg.model_dir = args.get_or("model", "");
  cfg.api_keys_file = args.get_or("api-keys", "");
  cfg.sla_file = args.get_or("sla-config", "");
  cfg.kv_weight = args.get_double("kv-weight", cfg.kv_weight, 0, 1e6);
  args.finish();
  return cluster::run_router(std::move(cfg));
}

MMRT_COMMAND(
    "router", "the OpenAI API in front of the mmrt workers registered in etcd",
    "usage: mmrt router --etcd URL --served-model-name ID [--port 8080] [options]\n\n"
    "Routes /v1/chat/completions and /v1/completions to the workers (`mmrt serve\n"
    "--cluster-etcd URL`) registered in etcd that serve the model ID; /v1/models, /health\n"
    "(the workers it routes to, and whether etcd answers) and /metrics are its own.\n"
    "A request goes to the first worker in rendezvous order for its conversation (the tenant\n"
    "and the messages up to the first user message: every turn lands where its prefix and images\n"
    "are cached) that takes it; a worker's 429 / 503, or a connection that fails before any\n"
    "byte of the answer, passes it to the next; when every worker refuses, the client gets the\n"
    "last refusal (429, its reason and Retry-After) at once. Answers are relayed as they come,\n"
    "with x-mmrt-worker naming the worker. Without etcd the router routes on its last view of\n"
    "the workers and says so in /health. See docs/scale-out.md.\n\n"
    "  --etcd URL              etcd's client URL (http://host:port)\n"
    "  --served-model-name ID  the model this router serves; workers of other models are not\n"
    "                          used (a log line says so)\n"
    "  --cluster-prefix P      the key prefix workers register under (default /mmrt/workers/)\n"
    "  --nats URL              read the workers' load gauges (`mmrt serve --cluster-nats`) from\n"
    "                          NATS (nats://host:port): a request leaves its affinity worker\n"
    "                          for the least loaded one when the first carries more than\n"
    "                          --balance-abs N (8) more requests and over --balance-rel X (2)\n"
    "                          times its load. Each gauge carries the worker's admission\n"
    "                          quote: per SLA class, the first token of a request of no work\n"
    "                          of its own, and the price of a prompt token, an encoder patch\n"
    "                          and a media item. The router predicts each request's first\n"
    "                          token on each worker (the quoted queue, less its age, + what it\n"
    "                          sent there since + the request's own work: its tokens past the\n"
    "                          worker's prefix cache with --model), sends it to the first\n"
    "                          worker in cost order predicted to meet its class, and refuses\n"
    "                          it at once (429, reason, Retry-After) when every worker is\n"
    "                          quoted and none is, as a worker would; x-mmrt-predicted-ttft-ms\n"
    "                          says what it predicted for the worker that answered\n"
    "  --model DIR             KV-aware routing (with --nats): the checkpoint the workers\n"
    "                          serve (its tokenizer and processor only, no weights). The router\n"
    "                          lays each prompt out as the workers do (chat template, tokens,\n"
    "                          inline images placed from their headers) and computes its\n"
    "                          prefix-cache block keys; each worker publishes the keys it\n"
    "                          holds. A request goes to the worker of lowest cost = W x blocks\n"
    "                          it would prefill + KV blocks its running requests hold (Dynamo's\n"
    "                          rule); when no worker holds any of its blocks, the affinity\n"
    "                          order stands. x-mmrt-predicted-cached-tokens says what the\n"
    "                          router expected the worker to find cached\n"
    "  --kv-weight W           the weight on blocks to prefill (default 1)\n"
    "  --api-keys FILE         the workers' key file: a key's tenant salts its cache keys and\n"
    "                          names its default class (without it, every request is the\n"
    "                          tenant \"default\", as on an open worker)\n"
    "  --sla-config FILE       the workers' SLA classes, which requests and keys name (give\n"
    "                          the router the workers' own, or its predictions judge requests\n"
    "                          by other promises)\n"
    "  --host ADDR             address to listen on (default 127.0.0.1)\n"
    "  --port N                port (default 8080; 0: any free port)\n"
    "  --http-threads N        event-loop threads (default 2)\n"
    "  --max-connections N     open connections at most (default 4096)\n"
    "  --max-requests N        requests relayed at once (default 1024; 503 beyond)\n"
    "  --max-body-mb N         request body limit in MiB (default 64; 413 beyond)\n"
    "  --poll-ms MS            how often the workers are read from etcd (default 200)\n"
    "  --connect-timeout-ms MS a worker that does not accept within MS is passed over (1000)\n"
    "  --drain-timeout S       on SIGTERM, requests in flight get S s to finish (10)\n",
    {}, run_router);

}  // namespace
}  // namespace mmrt::cli
