"""The message mixes of the benchmarks (issue 30): seeded generators, so that two runs compare.

Each mix is a function `(n, first=0, seed=1) -> list[Message]` giving messages number `first` to
`first + n - 1`; message i is the same whatever `first` the call starts from, so a benchmark may
generate a large store chunk by chunk. The shapes are the ones that have sent records off a fast
path before: non-ASCII keys and tags (Java's String.hashCode is over UTF-16 units), IPv6 hosts (a
20-byte host field), compressed bodies (sysFlag bit 0), topics of 127 characters (the longest a
one-byte length holds), many tiny messages (the per-record cost), few large ones (up to 4 MB, the
default maxMessageSize), and the mix the RocketMQ comparison of issue 30 used.

    MIXES["non-ascii"](1000)           # 1,000 messages
    for name, make in MIXES.items(): ...
"""
import random, zlib

from mqstore.message import COMPRESSED_FLAG, Message

MB = 1 << 20
LATIN = ["clé", "größe", "façade", "niño", "smörgås", "crème", "ﬁn"]          # ﬁ: a ligature, 3 UTF-8 bytes
CJK = ["注文", "キー", "주문", "用户", "タグ", "订单号"]
EMOJI = ["🚀", "😀", "𝄞"]                                                     # outside the BMP: surrogate pairs in Java


def _rng(seed, i):
    return random.Random(seed * 1_000_003 + i)


def _v4(r):
    return (f"10.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(1, 255)}", r.randrange(1024, 65536))


def _v6(r):
    return (f"2001:db8:{r.randrange(1 << 16):x}:{r.randrange(1 << 16):x}::{r.randrange(1, 1 << 16):x}",
            r.randrange(1024, 65536))


_POOL = random.Random(7).randbytes(1 << 22)            # 4 MiB of incompressible bytes bodies are cut from
_TEXT = (" ".join(f"order {i} item {i % 97} qty {i % 13} price {i % 1000}.{i % 100:02d}" for i in range(60_000))
         ).encode()                                     # compressible text, as JSON or logs are


def _body(r, lo, hi):
    n = r.randrange(lo, hi + 1)
    at = r.randrange(len(_POOL) - n + 1)
    return _POOL[at:at + n]


def _uniq(i):
    return f"0A0000{i:026X}"


def _message(i, topic, body, props, r, queues=4, v6=False, sys_flag=0):
    return Message(topic, body, queue_id=i % queues, properties=props, sys_flag=sys_flag,
                   born_timestamp=1_700_000_000_000 + i, born_host=_v6(r) if v6 else _v4(r))


def mix(one):
    "A mix from `one(i, r)`, the message number i built with its own seeded random r: `(n, first=0, seed=1) -> list`."
    def make(n, first=0, seed=1):
        return [one(i, _rng(seed, i)) for i in range(first, first + n)]
    make.__name__, make.__doc__ = one.__name__, one.__doc__
    return make


@mix
def ascii_only(i, r):
    "ASCII everywhere: 8 short topics x 4 queues, bodies 0-2 KB, TAGS, 1-3 KEYS, UNIQ_KEY, IPv4 hosts."
    props = {"TAGS": r.choice(["TagA", "TagB", "created", "paid"]), "UNIQ_KEY": _uniq(i),
             "KEYS": " ".join(f"key-{r.randrange(1 << 30)}" for _ in range(r.randrange(1, 4)))}
    return _message(i, f"topic-{i % 8}", _body(r, 0, 2048), props, r)


@mix
def non_ascii(i, r):
    "Keys and tags in accented Latin, CJK and (1 in 20) characters outside the BMP; ASCII topics, as RocketMQ requires."
    words = LATIN + CJK + (EMOJI if i % 20 == 0 else [])
    keys = [f"{r.choice(words)}-{r.randrange(1 << 20)}" for _ in range(r.randrange(1, 4))]
    props = {"TAGS": r.choice(CJK + LATIN), "UNIQ_KEY": _uniq(i), "KEYS": " ".join(keys), "région": r.choice(LATIN)}
    return _message(i, f"topic-{i % 8}", _body(r, 0, 2048), props, r)


@mix
def ipv6(i, r):
    "Every born host IPv6 (20-byte host fields); otherwise the ASCII mix."
    props = {"TAGS": "TagA", "UNIQ_KEY": _uniq(i), "KEYS": f"key-{r.randrange(1 << 30)}"}
    return _message(i, f"topic-{i % 8}", _body(r, 0, 2048), props, r, v6=True)


@mix
def compressed(i, r):
    "Bodies of 4-16 KB of text, zlib-compressed as RocketMQ's producer does above 4 KB (sysFlag bit 0 set)."
    size = r.randrange(4096, 16385)
    at = r.randrange(len(_TEXT) - size)
    props = {"TAGS": "TagA", "UNIQ_KEY": _uniq(i), "KEYS": f"key-{i}"}
    return _message(i, f"topic-{i % 8}", zlib.compress(_TEXT[at:at + size], 5), props, r, sys_flag=COMPRESSED_FLAG)


LONG_TOPICS = [(f"very-long-topic-{k}-" + "x" * 127)[:127] for k in range(4)]


@mix
def long_topics(i, r):
    "Topics of 127 characters (the longest a version-1 record's one-byte length holds), 4 of them."
    props = {"TAGS": "TagA", "UNIQ_KEY": _uniq(i), "KEYS": f"key-{r.randrange(1 << 30)}"}
    return _message(i, LONG_TOPICS[i % 4], _body(r, 0, 2048), props, r)


@mix
def tiny(i, r):
    "Many tiny messages: bodies of 0-32 bytes, a UNIQ_KEY and nothing else (the per-record cost)."
    return _message(i, f"t{i % 8}", _body(r, 0, 32), {"UNIQ_KEY": _uniq(i)}, r)


@mix
def large(i, r):
    "Few large messages: bodies of 256 KB to 4 MB minus 1 KB (under the default maxMessageSize of 4 MB)."
    props = {"TAGS": "big", "UNIQ_KEY": _uniq(i), "KEYS": f"file-{i}"}
    return _message(i, f"blobs-{i % 2}", _body(r, 256 * 1024, 4 * MB - 1024), props, r)


ROCKETMQ_TOPICS = ["TopicTest", "orders", "payments", "audit-log", ("T" * 120 + "-long-x")[:127]]


@mix
def rocketmq(i, r):
    """The mix of issue 30's comparison with RocketMQ's DefaultMessageStore: five topics (one of 127
    characters), three queues each, bodies of 0 to 1.8 KB (one in eleven empty), one born host in six
    IPv6, TAGS, three KEYS of which one has a non-ASCII character (clé-N), one custom property, a UNIQ_KEY."""
    body = b"" if i % 11 == 0 else _body(r, 1, 1800)
    props = {"TAGS": f"Tag{i % 5}", "KEYS": f"k-{i} order-{i % 1000} clé-{i}", "custom": f"v{i % 100}",
             "UNIQ_KEY": _uniq(i)}
    return _message(i, ROCKETMQ_TOPICS[i % 5], body, props, r, queues=3, v6=i % 6 == 0)


MIXES = {"ascii": ascii_only, "non-ascii": non_ascii, "ipv6": ipv6, "compressed": compressed,
         "long-topics": long_topics, "tiny": tiny, "large": large, "rocketmq": rocketmq}


def mean_record(make, sample=400) -> float:
    "The mean encoded record of a mix, from a sample (to size a store in bytes)."
    from mqstore.message import encode_record
    msgs = make(sample, first=10_000)
    return sum(len(encode_record(m.to_stored())) for m in msgs) / len(msgs)


def chosen() -> dict:
    "The mixes named by MQSTORE_BENCH_MIXES (comma-separated), or all of them."
    import os
    names = [s.strip() for s in os.environ.get("MQSTORE_BENCH_MIXES", "").split(",") if s.strip()]
    unknown = [s for s in names if s not in MIXES]
    if unknown:
        raise SystemExit(f"unknown mixes {unknown}; the mixes are {', '.join(MIXES)}")
    return {k: MIXES[k] for k in names} if names else dict(MIXES)
