"""broker.conf: Java Properties syntax, the store settings it sets, and their defaults."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storelib.broker.config import (
    BrokerConfig,
    broker_config_from_properties,
    load_broker_config,
    load_store_config,
    parse_delay_levels,
    parse_properties,
)
from storelib.errors import ConfigError
from tests.roundtrip import assert_roundtrip

DEFAULT_DELAYS_MS = (
    1_000,
    5_000,
    10_000,
    30_000,
    60_000,
    120_000,
    180_000,
    240_000,
    300_000,
    360_000,
    420_000,
    480_000,
    540_000,
    600_000,
    1_200_000,
    1_800_000,
    3_600_000,
    7_200_000,
)


def test_defaults_are_the_4_9_x_defaults() -> None:
    cfg = BrokerConfig()
    assert cfg.mappedFileSizeCommitLog == 1073741824
    assert cfg.mappedFileSizeConsumeQueue == 6000000
    assert cfg.cq_file_size == 6000000
    assert cfg.maxHashSlotNum == 5000000
    assert cfg.maxIndexNum == 20000000
    assert cfg.messageIndexEnable is True
    assert cfg.enableConsumeQueueExt is False
    assert cfg.checkCRCOnRecover is True
    assert cfg.hashSlotCountRule == "occupied"
    assert cfg.delay_levels_ms == DEFAULT_DELAYS_MS
    assert load_broker_config(None) == cfg


@pytest.mark.parametrize(("size", "file_size"), [(8000, 8000), (8001, 8020), (8019, 8020), (20, 20), (1, 20)])
def test_consume_queue_file_size_rounds_up_to_whole_units(size: int, file_size: int) -> None:
    assert BrokerConfig(mappedFileSizeConsumeQueue=size).cq_file_size == file_size


def test_delay_levels() -> None:
    assert parse_delay_levels("1s 2m 3h 1d") == (1_000, 120_000, 10_800_000, 86_400_000)
    assert parse_delay_levels("") == ()


@pytest.mark.parametrize("text", ["5x", "s", "1.5s", "-1s", "1S"])
def test_unreadable_delay_level(text: str) -> None:
    with pytest.raises(ConfigError, match="messageDelayLevel"):
        parse_delay_levels(f"1s {text}")


def test_fixture_broker_conf(fixture_cfg: BrokerConfig) -> None:
    assert fixture_cfg == BrokerConfig(
        mappedFileSizeCommitLog=131072,
        mappedFileSizeConsumeQueue=8000,
        maxHashSlotNum=701,
        maxIndexNum=3000,
        messageIndexEnable=True,
        enableConsumeQueueExt=False,
        checkCRCOnRecover=True,
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=b", {"a": "b"}),
        ("a = b", {"a": "b"}),
        ("a:b", {"a": "b"}),
        ("a : b", {"a": "b"}),
        ("a b", {"a": "b"}),
        ("a\tb", {"a": "b"}),
        ("   a=b", {"a": "b"}),
        ("a==b", {"a": "=b"}),
        ("a=b=c", {"a": "b=c"}),
        ("a b=c", {"a": "b=c"}),
        ("a=1s 5s  10s", {"a": "1s 5s  10s"}),
        ("a=", {"a": ""}),
        ("a", {"a": ""}),
        ("# a=b\n! c=d\n\n   \n", {}),
        ("a=#not a comment", {"a": "#not a comment"}),
        ("a=b\na=c", {"a": "c"}),
        ("a=b\\\n    c", {"a": "bc"}),
        ("a=b \\\n  c \\\n  d", {"a": "b c d"}),
        ("a=b\\\n# still a\nc=d", {"a": "b# still a", "c": "d"}),
        ("a=b\\", {"a": "b"}),
        ("a=b\r\nc=d\re=f", {"a": "b", "c": "d", "e": "f"}),
        # only \n and \r end a line: latin-1 0x85 (NEL), \x1c, \v, \u2028 do not
        ("# settings\x85 maxIndexNum=5\na=b", {"a": "b"}),
        ("a=x\x1cy\vz\u2028", {"a": "x\x1cy\vz\u2028"}),
        # only space, tab and form feed are blanks
        ("\f\ta\f=\fb", {"a": "b"}),
        ("\u3000a=b\xa0", {"\u3000a": "b\xa0"}),
        # escapes, as Properties.load reads them: \uXXXX, \t..., an escaped separator or blank in a key
        ("brokerName=caf\\u00e9\\tbar", {"brokerName": "caf\u00e9\tbar"}),
        ("k\\ e\\=y\\:=v", {"k e=y:": "v"}),
        ("\\u0061=\\#\\!", {"a": "#!"}),
    ],
)
def test_java_properties_syntax(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


def test_a_malformed_unicode_escape_names_the_file(tmp_path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=\\u00zz\n")
    with pytest.raises(ConfigError, match=f"{conf}.*malformed"):
        load_broker_config(conf)


# --- round trip of a generated broker.conf -------------------------------------------------

JAVA_BLANKS = " \t\f"  # the only characters Properties.load treats as white space
# no escapes (backslashes are not supported) and no line terminators inside a key or value
plain = st.characters(exclude_characters="\\\n\r", exclude_categories=("Cs",))
keys = st.text(plain, min_size=1, max_size=12).filter(
    lambda k: k[0] not in "#!" and not any(c in k for c in JAVA_BLANKS + "=:")
)
# values: no leading/trailing blank, and not starting with = or : (a separator would swallow it)
values = st.text(plain, max_size=20).map(lambda v: v.strip(JAVA_BLANKS)).filter(lambda v: v[:1] not in ("=", ":"))
separators = st.sampled_from(["=", ":", " = ", " : ", " ", "\t", "  =  "])
fillers = st.sampled_from(["", "# a comment", "! a comment", "   ", "#key=value"])


@st.composite
def conf_styles(draw: st.DrawFn) -> tuple[list[str], list[str], list[int], str]:
    """How to write a properties file: separator, a line before each pair, a split point, newline."""
    n = 12
    return (
        draw(st.lists(separators, min_size=n, max_size=n)),
        draw(st.lists(fillers, min_size=n, max_size=n)),
        draw(st.lists(st.integers(0, 20), min_size=n, max_size=n)),
        draw(st.sampled_from(["\n", "\r\n", "\r"])),
    )


def render_properties(props: dict[str, str], style: tuple[list[str], list[str], list[int], str]) -> str:
    """A Java properties file for ``props``: mixed separators, comments, and continuation lines."""
    seps, fills, splits, nl = style
    lines = []
    for i, (k, v) in enumerate(props.items()):
        lines.append(fills[i % len(fills)])
        cut = splits[i % len(splits)]
        if 0 < cut < len(v) and not v[cut].isspace():
            # a continuation line: its leading blanks are dropped, so cut before a non-blank
            v = f"{v[:cut]}\\{nl}      {v[cut:]}"
        lines.append(f"{k}{seps[i % len(seps)]}{v}")
    return nl.join(lines) + nl


@given(st.dictionaries(keys, values, max_size=12), conf_styles())
def test_properties_roundtrip(props: dict[str, str], style) -> None:
    assert_roundtrip(lambda p: render_properties(p, style), parse_properties, props)


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), values), max_size=8))
def test_properties_last_duplicate_wins(pairs: list[tuple[str, str]]) -> None:
    text = "".join(f"{k}={v}\n" for k, v in pairs)
    assert parse_properties(text) == dict(pairs)


ints = st.integers(1, 2**31 - 1)
delay_words = st.lists(st.tuples(st.integers(0, 999), st.sampled_from("smhd")), max_size=20)
broker_configs = st.builds(
    BrokerConfig,
    mappedFileSizeCommitLog=ints,
    mappedFileSizeConsumeQueue=st.integers(1, 2**31 - 20),
    maxHashSlotNum=st.integers(1, 2**27),  # with maxIndexNum, an IndexFile stays within one 2 GiB buffer
    maxIndexNum=st.integers(2, 2**26),
    messageIndexEnable=st.booleans(),
    enableConsumeQueueExt=st.booleans(),
    checkCRCOnRecover=st.booleans(),
    messageDelayLevel=delay_words.map(lambda ws: " ".join(f"{n}{u}" for n, u in ws)),
    hashSlotCountRule=st.sampled_from(["occupied", "every-put"]),
)


def render_broker_conf(cfg: BrokerConfig, style) -> str:
    """broker.conf text: every setting, booleans as Java writes them, plus settings storelib ignores."""
    props = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in dataclasses.asdict(cfg).items()}
    props = {"brokerClusterName": "DefaultCluster", **props, "flushDiskType": "SYNC_FLUSH"}
    return render_properties(props, style)


@given(broker_configs, conf_styles())
def test_broker_conf_roundtrip(cfg: BrokerConfig, style) -> None:
    assert_roundtrip(
        lambda c: render_broker_conf(c, style),
        lambda text: broker_config_from_properties(parse_properties(text)),
        cfg,
    )


def test_load_broker_config_file(tmp_path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("maxIndexNum = 4\nmessageIndexEnable:FALSE\nunknownSetting=whatever\n", encoding="latin-1")
    assert load_broker_config(path) == BrokerConfig(maxIndexNum=4, messageIndexEnable=False)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("maxIndexNum=lots", "maxIndexNum='lots' is not an integer"),
        ("messageIndexEnable=yes", "messageIndexEnable='yes' is not true or false"),
        ("maxHashSlotNum=0", "maxHashSlotNum must be between 1 and 2147483647"),
        ("mappedFileSizeCommitLog=-1", "mappedFileSizeCommitLog must be between 1 and 2147483647"),
        ("mappedFileSizeCommitLog=2147483648", "mappedFileSizeCommitLog must be between 1 and 2147483647"),
        ("maxHashSlotNum=2147483647", "the broker maps it in one buffer"),
        ("maxIndexNum=107374182", "the broker maps it in one buffer"),
        ("mappedFileSizeConsumeQueue=2147483647", "mappedFileSizeConsumeQueue 2147483647 is over"),
        ("maxIndexNum=1", "maxIndexNum must be at least 2"),
        ("hashSlotCountRule=sometimes", "hashSlotCountRule must be"),
        ("messageDelayLevel=1s 1w", "messageDelayLevel"),
    ],
)
def test_bad_settings_name_the_file(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(text + "\n", encoding="latin-1")
    with pytest.raises(ConfigError, match=str(path)) as err:
        load_broker_config(path)
    assert message in str(err.value)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read broker config"):
        load_broker_config(tmp_path / "nope.conf")


def test_a_device_or_an_endless_file_is_not_read(tmp_path) -> None:
    with pytest.raises(ConfigError, match="not a regular file"):
        load_broker_config("/dev/zero")
    with pytest.raises(ConfigError, match="not a regular file"):
        load_broker_config(tmp_path)
    big = tmp_path / "big.conf"
    big.write_bytes(b"#" * (2 << 20))
    with pytest.raises(ConfigError, match="not a properties file"):
        load_broker_config(big)


def test_the_segment_size_is_read_off_the_files_when_the_config_does_not_set_it(tmp_path) -> None:
    sizes = [65536, 65536, 65536, 4096]  # the last one cut short by damage
    cfg, note = load_store_config(None, sizes)
    assert cfg.mappedFileSizeCommitLog == 65536 and "read off the segment files" in str(note)
    assert load_store_config(None, []) == (BrokerConfig(), None)
    assert load_store_config(None, [1 << 30]) == (BrokerConfig(), None)
    assert load_store_config(None, [4096, 65536])[0].mappedFileSizeCommitLog == 65536  # a tie: the larger
    path = tmp_path / "broker.conf"
    path.write_text("maxIndexNum=400\n")
    cfg, note = load_store_config(path, sizes)
    assert (cfg.mappedFileSizeCommitLog, cfg.maxIndexNum) == (65536, 400) and str(path) in str(note)
    path.write_text("mappedFileSizeCommitLog=1048576\n")
    cfg, note = load_store_config(path, sizes)
    assert cfg.mappedFileSizeCommitLog == 1048576 and "contradicts" in str(note)
