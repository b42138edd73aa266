"""The trajectory columns the analyzers share: lazy numpy columns, labels, grouping, ranks."""

from __future__ import annotations

import itertools
import math
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from damage import damage_column

from rlscope import Recorder, RunReader
from rlscope.analyzers import _data, analyze_run, longtail, rewards, staleness, sync_balance
from rlscope.analyzers._data import (
    Pieces,
    RunFrames,
    Trajectories,
    chunks,
    group_counts,
    group_pieces,
    group_rows,
    labels,
    segment_ids,
)
from rlscope.analyzers.staleness import average_ranks
from rlscope.errors import RunDirError


def _rows(step: int, engines: list[str | None], lag: list[int]) -> list[dict]:
    return [
        {
            "step": step,
            "traj_id": f"{step}-{i}",
            "engine": e,
            "response_tokens": 100 * (i + 1),
            "finish_time": float(i + 1),
            "policy_version_start": step - lg,
            "trainer_version": step,
            "data_source": "math" if i % 2 else None,
            "reward": float(i % 3 == 0),
        }
        for i, (e, lg) in enumerate(zip(engines, lag, strict=True))
    ]


@pytest.fixture
def column_reads(monkeypatch) -> list[tuple[str, ...]]:
    """The columns of each read a reader makes from now on, in order."""
    reads: list[tuple[str, ...]] = []
    original = RunReader.read_available

    def counting(self, table, columns=None, *args, **kwargs):
        reads.append(tuple(columns or ()))
        return original(self, table, columns, *args, **kwargs)

    monkeypatch.setattr(RunReader, "read_available", counting)
    return reads


@pytest.fixture
def run(tmp_path):
    """Two segments of trajectories: the reader sees them as two chunks per column."""
    with Recorder(tmp_path, meta={"gpu": {"count": 2}}) as rec:
        rec.log_trajectories(1, _rows(1, ["e-b", "e-a", None], [0, 1, 2]))
        rec.flush()
        rec.log_trajectories(2, _rows(2, ["e-a", "e-c", "e-a"], [3, 0, 3]))
    return tmp_path


def test_columns_read_from_a_run_match_the_rows_written(run):
    traj = Trajectories(RunReader(run))
    assert len(traj) == 6 and not traj.empty
    assert traj.numbers("step").tolist() == [1, 1, 1, 2, 2, 2]
    assert traj.numbers("step").dtype.kind == "i"  # no gap: ints stay ints
    assert np.isnan(traj.numbers("gen_s")).all()  # never logged: all missing
    assert traj.flags("aborted").tolist() == [False] * 6  # missing reads as False
    assert traj.has("engine") and traj.has("finish_time") and not traj.has("gen_s")
    codes, names = traj.labels("engine")
    assert names.tolist() == ["e-a", "e-b", "e-c"]  # sorted, whatever order the dictionary had
    assert [names[c] if c >= 0 else None for c in codes] == ["e-b", "e-a", None, "e-a", "e-c", "e-a"]
    codes, names = traj.labels("engine", ordered=False)
    assert [names[c] if c >= 0 else None for c in codes] == ["e-b", "e-a", None, "e-a", "e-c", "e-a"]
    codes, names = traj.labels("data_source", missing="(unknown)")
    assert [names[c] for c in codes] == ["(unknown)", "math", "(unknown)"] * 2


def test_every_source_gives_the_same_columns(run):
    from_reader = Trajectories(RunReader(run))
    table = RunReader(run).read("trajectories")
    for other in (Trajectories(table), Trajectories(table.to_pandas())):
        assert len(other) == len(from_reader)
        for name in ("step", "finish_time", "response_tokens", "reward"):
            np.testing.assert_array_equal(other.numbers(name), from_reader.numbers(name))
        for name in ("engine", "data_source"):
            for a, b in zip(other.labels(name, "?"), from_reader.labels(name, "?"), strict=True):
                assert a.tolist() == b.tolist()
    frame_without = Trajectories(pd.DataFrame({"step": [1, 2]}))
    assert not frame_without.has("engine") and np.isnan(frame_without.numbers("reward")).all()
    assert Trajectories().empty and len(RunFrames(pd.DataFrame()).trajectories) == 0


def test_prefetched_columns_are_the_columns_read_on_demand(run):
    eager, lazy = Trajectories(RunReader(run)), Trajectories(RunReader(run))
    eager.prefetch(["step", "engine", "reward", "not-a-column"])
    np.testing.assert_array_equal(eager.numbers("reward"), lazy.numbers("reward"))
    assert eager.labels("engine")[0].tolist() == lazy.labels("engine")[0].tolist()
    assert eager.numbers("step").tolist() == lazy.numbers("step").tolist()


def test_a_segment_landing_between_column_reads_does_not_misalign_them(run):
    traj = Trajectories(RunReader(run))
    steps = traj.numbers("step")
    with Recorder(run) as rec:
        rec.log_trajectories(3, _rows(3, ["e-a"], [0]))
    assert len(traj.numbers("finish_time")) == len(steps) == 6  # pinned to the segments listed at first
    assert len(Trajectories(RunReader(run))) == 7


def test_a_segment_vanishing_mid_read_is_a_clear_error(run):
    traj = Trajectories(RunReader(run))
    traj.numbers("step")
    for segment in (run / "trajectories").glob("*.parquet"):
        segment.unlink()
    with pytest.raises(RunDirError, match="went away while it was being read"):
        traj.numbers("finish_time")


def _damage_first_segment(run, column: str) -> str:
    path = sorted((run / "trajectories").glob("*.parquet"))[0]
    damage_column(path, column)
    return str(path)


def test_a_segment_whose_steps_do_not_read_is_left_out_of_every_column(run, caplog):
    damaged = _damage_first_segment(run, "step")
    reader = RunReader(run)
    traj = Trajectories(reader)
    traj.prefetch(["finish_time", "engine"])
    assert len(traj) == 3  # the second segment's rows alone, in every column
    assert traj.numbers("step").tolist() == [2, 2, 2]
    assert traj.numbers("finish_time").tolist() == [1.0, 2.0, 3.0]
    codes, names = traj.labels("engine")
    assert [names[c] for c in codes] == ["e-a", "e-c", "e-a"]
    assert any(damaged in w and "unreadable" in w for w in reader.warnings)
    diagnosis = analyze_run(RunReader(run))  # the rest of the run is analysed
    assert diagnosis.staleness.per_step.index.tolist() == [2]


def test_a_column_that_does_not_read_is_missing_for_its_segment_s_rows_alone(run):
    _damage_first_segment(run, "reward")
    traj = Trajectories(RunReader(run))
    assert traj.numbers("step").tolist() == [1, 1, 1, 2, 2, 2]
    reward = traj.numbers("reward")
    assert np.isnan(reward[:3]).all() and reward[3:].tolist() == [1.0, 0.0, 0.0]
    assert traj.numbers("finish_time").tolist() == [1.0, 2.0, 3.0] * 2  # the segment's other columns count
    assert traj.labels("engine", ordered=False)[0].size == 6


def test_nan_is_as_missing_as_null_in_every_source():
    # the Recorder writes a missing float as NaN: an Arrow table of NaNs has no values either
    table = pa.table({"step": [1, 2], "finish_time": [float("nan")] * 2, "engine": pa.array([None, None], pa.string())})
    for traj in (Trajectories(table), Trajectories(table.to_pandas())):
        assert not traj.has("finish_time") and not traj.has("engine") and traj.has("step")


def test_a_pandas_column_of_mixed_types_reads_as_text():
    frame = pd.DataFrame({"step": [1, 1, 2], "data_source": ["a", 3, None]})
    codes, names = Trajectories(frame).labels("data_source", missing="?")
    assert [names[c] for c in codes] == ["a", "3", "?"]


def test_labels_of_plain_and_dictionary_arrow_columns():
    plain = pa.chunked_array([["b", None, "a"], ["b"]])
    codes, names = labels(plain)
    assert names.tolist() == ["a", "b"] and codes.tolist() == [1, -1, 0, 1]
    dictionary = pa.chunked_array([pa.array(["z", "y"]).dictionary_encode(), pa.array(["y", "x"]).dictionary_encode()])
    codes, names = labels(dictionary, missing="y")  # different dictionaries per chunk are unified
    assert [names[c] for c in codes] == ["z", "y", "y", "x"] and names.tolist() == ["x", "y", "z"]
    codes, names = labels(None, missing="none", rows=3)
    assert names.tolist() == ["none"] and codes.tolist() == [0, 0, 0]


@pytest.mark.parametrize("sizes", [[3, 0, 2], [0, 0, 1], [2, 0, 0], [1], [0], [], [5, 5, 5]])
def test_segment_ids_repeat_each_group_index_by_its_size(sizes):
    expected = [i for i, n in enumerate(sizes) for _ in range(n)]
    assert segment_ids(np.array(sizes, dtype=np.int64)).tolist() == expected


@pytest.mark.parametrize("looped", [True, False])
def test_group_rows_and_group_counts_unsorted_and_empty(looped, monkeypatch):
    # both ways of counting: a bincount per group, or one over (group, code) cells of all rows
    monkeypatch.setattr(_data, "_ROWS_PER_GROUP_LOOPED", 0 if looped else 10**9)
    g = group_rows(np.array([3, 1, 3, 2, 1]))
    assert g.keys.tolist() == [1, 2, 3] and g.sizes.tolist() == [2, 1, 2]
    assert g.take(np.array([10, 11, 12, 13, 14])).tolist() == [11, 14, 13, 10, 12]  # stable within a key
    codes, weights = np.array([0, 1, 0, 1, 0]), np.array([10.0, 11.0, 12.0, 13.0, 14.0])
    # key 1: rows 1 (code 1) and 4 (code 0); key 2: row 3 (code 1); key 3: rows 0 and 2 (code 0)
    assert group_counts(g, codes, 2).tolist() == [[1, 1], [0, 1], [2, 0]]
    assert group_counts(g, codes, 2, weights).tolist() == [[14.0, 11.0], [0.0, 13.0], [22.0, 0.0]]
    empty = group_rows(np.array([], dtype=np.int64))
    assert empty.keys.size == empty.starts.size == empty.ends.size == 0
    assert group_counts(empty, np.array([], dtype=np.int64), 3).shape == (0, 3)


def test_chunks_hand_out_whole_groups():
    g = group_rows(np.array([1, 1, 1, 2, 5, 5, 7]))  # groups of 3, 1, 2 and 1 rows
    got = [(steps, rows, local.tolist()) for steps, rows, local in chunks(g, rows=3)]
    # a chunk ends at the first group starting at or past 3 rows on; a bigger group is a chunk alone
    assert got == [
        (slice(0, 1), slice(0, 3), [0, 0, 0]),
        (slice(1, 3), slice(3, 6), [0, 1, 1]),
        (slice(3, 4), slice(6, 7), [0]),
    ]
    assert list(chunks(group_rows(np.array([], dtype=np.int64)))) == []


def test_average_ranks_match_pandas_for_counted_and_sorted_values():
    rng = np.random.default_rng(7)
    for x in (
        rng.integers(0, 6, 500),  # small integers: ranked by counting
        rng.integers(0, 10**9, 50).astype(float),  # wide: ranked by sorting
        rng.normal(size=300),
        np.array([2.0, 2.0, 2.0]),
    ):
        np.testing.assert_allclose(average_ranks(x), pd.Series(x).rank().to_numpy())


@pytest.mark.parametrize(
    "make_lag",
    [
        lambda lag: lag,  # small integers: counted
        lambda lag: lag * 1000,  # integers too spread out to count: sorted
        lambda lag: lag + 0.5,  # not integers: sorted
    ],
)
def test_per_step_lag_quantiles_match_numpy(make_lag):
    rng = np.random.default_rng(3)
    step = np.repeat(np.arange(40), rng.integers(1, 30, 40))
    lag = make_lag(rng.integers(0, 9, step.size))
    got = staleness._per_step(group_rows(step), lag, 4)
    for s, p50, p90 in zip(got["step"], got["p50"], got["p90"], strict=True):
        mine = lag[step == s].astype(float)
        assert (p50, p90) == tuple(np.quantile(mine, (0.5, 0.9), method="inverted_cdf"))


@pytest.mark.parametrize(
    "lags",
    [
        [[5, 5, 5], [2, 2], [9]],  # every step's lags equal: each step's n copies of one lag
        [[5, 5, 5], [1, 7], [9]],  # one step varies
    ],
)
def test_per_step_lag_mean_share_and_extremes_match_the_samples(lags):
    step = np.repeat(np.arange(len(lags)), [len(x) for x in lags])
    got = staleness._per_step(group_rows(step), np.concatenate(lags), 4)
    for i, x in enumerate(lags):
        x = np.array(x)
        want = (x.size, x.mean(), (x > 4).mean(), float(x.min()), float(x.max()))
        assert (got["n"][i], got["mean"][i], got["over_threshold"][i], got["min"][i], got["max"][i]) == want


def test_analyzers_agree_on_frames_from_pandas_and_from_the_run(run):
    reader = RunReader(run)
    frames = RunFrames(pd.DataFrame(), reader.read("trajectories").to_pandas(), reader.meta)
    assert rewards.analyze(frames.trajectories).by_step.equals(rewards.analyze(reader).by_step)
    from_run = analyze_run(reader)
    engines = sync_balance.analyze(frames).engines
    pd.testing.assert_frame_equal(engines, from_run.sync_balance.engines)
    assert engines["heaviest"].tolist() == ["e-a", "e-a"]  # 200 of 300 tokens in step 1, 400 of 600 in step 2
    assert engines["heaviest_share"].tolist() == pytest.approx([2 / 3, 2 / 3])
    # e-b served in step 1 only, e-c in step 2 only: neither is there in the other step
    assert engines["n_engines"].tolist() == [2, 2] and engines["starved"].tolist() == [0, 0]


def test_a_step_split_across_segments_reads_as_it_does_whole(tmp_path):
    # step 2's rows lie in two segments: the analyzers that slice columns a chunk at a time
    # (long tail, staleness, rewards) must give what they give over the same rows in one piece
    rows = _rows(2, ["e-a", "e-c", "e-a", "e-b"], [3, 0, 3, 1])
    rows[3]["response_tokens"] = 0  # e-b served step 2 a response of no tokens: it was there all the same
    with Recorder(tmp_path, meta={"gpu": {"count": 2}}) as rec:
        rec.log_trajectories(1, _rows(1, ["e-b", "e-a", None], [0, 1, 2]))
        rec.flush()
        rec.log_trajectories(2, rows[:1])
        rec.flush()
        rec.log_trajectories(2, rows[1:])
    reader = RunReader(tmp_path)
    assert len(reader.segments("trajectories")) == 3
    whole = RunFrames(pd.DataFrame(), reader.read("trajectories").to_pandas(), reader.meta)
    pd.testing.assert_frame_equal(longtail.analyze(whole).per_step, longtail.analyze(reader).per_step)
    pd.testing.assert_frame_equal(staleness.analyze(whole).per_step, staleness.analyze(reader).per_step)
    pd.testing.assert_frame_equal(rewards.analyze(whole.trajectories).by_step, rewards.analyze(reader).by_step)
    engines = sync_balance.analyze(reader).engines
    pd.testing.assert_frame_equal(sync_balance.analyze(whole).engines, engines)
    assert engines.loc[2, "n_engines"] == 3 and engines.loc[2, "max_load"] == 100 + 300  # e-a's two responses
    # step 2 finished at 1, 2, 3 and 4 s: under 10 trajectories, its slowest 10% is 0.1 x 4 of
    # the last one's time past the one before, 0.4 x (4 - 3) s
    measured = longtail.analyze(reader).per_step.loc[2]
    assert measured["rollout_s"] == 4.0 and measured["t_tail_s"] == pytest.approx(0.4)


def test_an_infinite_engine_load_stays_infinite_and_judges_nothing():
    # a gap adds 0 to an engine's load; an infinite gen_s is no gap: it must not become the
    # largest float, whose imbalance would read as a critical finding
    rows = [{"step": s, "engine": e, "gen_s": g} for s in range(8) for e, g in (("a", 1.0), ("b", 1.1))]
    rows[-2]["gen_s"] = math.inf
    result = sync_balance.analyze(RunFrames(pd.DataFrame(index=pd.Index([], name="step")), pd.DataFrame(rows)))
    last = result.engines.loc[7]
    assert last["max_load"] == math.inf and math.isnan(last["cv"]) and math.isnan(last["utilisation"])
    assert "engine-imbalanced" not in [f.id for f in result.findings]
    assert result.engines.loc[0, "max_load"] == pytest.approx(1.1)


def test_each_column_is_read_from_the_run_once(run, column_reads):
    reads = column_reads
    traj = Trajectories(RunReader(run))
    traj.prefetch(["engine"])
    assert traj.has("engine")
    ordered, unordered, filled = traj.labels("engine"), traj.labels("engine", ordered=False), traj.labels("engine", "?")
    assert [ordered[1][c] for c in ordered[0] if c >= 0] == [unordered[1][c] for c in unordered[0] if c >= 0]
    assert "?" in filled[1]
    traj.numbers("step"), traj.step_groups(), traj.numbers("step")
    assert sorted(reads) == [("engine",), ("step",)]


def test_pieces_slice_as_the_joined_column_does():
    parts = [np.arange(0, 3), np.arange(3, 3), np.arange(3, 7), np.arange(7, 8)]  # an empty chunk among them
    pieces, whole = Pieces(parts), np.arange(8)
    assert len(pieces) == 8 and pieces.dtype == whole.dtype and np.array_equal(pieces.joined(), whole)
    for start in range(9):
        for stop in range(start, 9):
            assert np.array_equal(pieces[start:stop], whole[start:stop]), (start, stop)
    assert np.shares_memory(pieces[4:6], parts[2])  # within one chunk: a view, nothing copied
    assert np.array_equal(pieces[5:], whole[5:]) and np.array_equal(pieces[:-3], whole[:-3])
    with pytest.raises(ValueError, match="consecutive"):
        pieces[::2]
    # typed as numbers() types the column whole: bools stay bools, a gap makes floats, no rows keep the type
    for column in (
        pa.chunked_array([[True, False], [True]]),
        pa.chunked_array([[1, None], [3]]),
        pa.chunked_array([], pa.int64()),
    ):
        joined = Pieces(_data.number_chunks(column)).joined()
        assert joined.dtype == _data.numbers(column).dtype
        np.testing.assert_array_equal(joined, _data.numbers(column))


@pytest.mark.parametrize(
    "parts",
    [
        [[1, 1, 2], [2, 2, 3], [3], [4, 5]],  # groups running on into the next chunk, a chunk of one row
        [[1, 2], [3, 3], [4]],  # each chunk starting a group
        [[7, 7], [7, 7]],  # one group over both chunks
        [[1, 3], [2, 4]],  # out of order across chunks: grouped as the joined keys are
        [[2, 1], [3]],  # out of order within a chunk
        [[5, 5, 6]],
        [[1.0, 2.0], [np.nan], [3.0, 4.0]],  # a missing step in a chunk of its own: sorted last, as joined
    ],
)
def test_keys_grouped_chunk_by_chunk_as_they_are_joined(parts):
    kind = np.float64 if any(isinstance(k, float) for p in parts for k in p) else np.int64
    got = group_pieces(Pieces([np.array(p, dtype=kind) for p in parts]))
    want = group_rows(np.concatenate(parts).astype(kind))
    for name in ("keys", "starts", "ends"):
        assert (
            np.array_equal(getattr(got, name), getattr(want, name), equal_nan=kind is np.float64)
            and getattr(got, name).dtype == getattr(want, name).dtype
        ), name
    assert (got.order is None) == (want.order is None)
    assert want.order is None or np.array_equal(got.order, want.order)


def test_steps_split_together_split_as_each_step_alone():
    # steps of one size within a chunk are split as rows of one array; a step across chunks, of
    # under 10 trajectories or of one, alone: each must split as tail_split splits it by itself
    rng = np.random.default_rng(7)
    sizes = [12, 12, 12, 5, 1, 20, 20, 9, 30, 30, 10]
    keys = np.repeat(np.arange(len(sizes)), sizes)
    times = rng.exponential(10.0, keys.size).round(3)  # ties too
    cuts = [0, 30, 31, 80, 140, keys.size]  # chunks ending inside steps and between them
    parts = [times[a:b] for a, b in itertools.pairwise(cuts)]
    g = group_rows(keys)
    got = longtail._splits(Pieces(parts), g)
    for i, (a, b) in enumerate(zip(g.starts, g.ends, strict=True)):
        alone = longtail.tail_split(times[a:b])
        np.testing.assert_array_equal(got[:, i], [alone.rollout_s, alone.t_thr_s, alone.t_tail_s])
    table = longtail._split_table(g, got)
    assert table["tail_share"].tolist()[:3] == [
        longtail.tail_split(times[a:b]).tail_share for a, b in [(0, 12), (12, 24), (24, 36)]
    ]
    assert np.isnan(table.loc[4, "tail_share"])  # one trajectory: no tail


def test_a_column_in_step_order_is_its_chunks_read_once(run, column_reads, monkeypatch):
    # rows written in step order: the reward column is sliced from its two segments' chunks, never
    # joined; asked for whole afterwards, it is joined from them, not read again
    reads = column_reads
    traj = Trajectories(RunReader(run))
    rewards_in_order = traj.in_step_order("reward")
    assert isinstance(rewards_in_order, Pieces)
    expected = [float(i % 3 == 0) for i in range(3)] * 2
    assert rewards_in_order[2:5].tolist() == expected[2:5]  # across the two segments
    assert traj.numbers("reward").tolist() == expected
    assert sorted(reads) == [("reward",), ("step",)]
    # asked for whole and as pieces at once, from two threads, a column is still read once (its
    # read held up long enough for both to ask meanwhile)
    reads.clear()
    counting = RunReader.read_available

    def slow(self, table, columns=None, *args, **kwargs):
        if columns == ["reward"]:
            time.sleep(0.3)
        return counting(self, table, columns, *args, **kwargs)

    monkeypatch.setattr(RunReader, "read_available", slow)
    traj = Trajectories(RunReader(run))
    traj.step_groups()
    with ThreadPoolExecutor(2) as pool:
        whole, pieces = pool.submit(traj.numbers, "reward"), pool.submit(traj.in_step_order, "reward")
        assert whole.result().tolist() == pieces.result()[:].tolist() == expected
    assert sorted(reads) == [("reward",), ("step",)]
    # rows out of step order: the column is taken in step order, whole
    frame = pd.DataFrame({"step": [2, 1, 2, 1], "reward": [0.5, 1.0, 0.25, 0.0]})
    assert Trajectories(frame).in_step_order("reward").tolist() == [1.0, 0.0, 0.5, 0.25]


def test_an_arrow_backed_pandas_column_reads_as_its_values_whole():
    # pandas' str columns hold Arrow chunks (one per segment read): taken as they are, each value
    # and each gap must come out as the column's values, in one chunk, as a column of Python values does
    chunked = pa.table({"engine": pa.chunked_array([["e0", None], ["e1"], []], pa.string())}).to_pandas()["engine"]
    dictionary = pd.Series(
        pa.chunked_array([pa.array(["a", None]).dictionary_encode(), pa.array(["b"]).dictionary_encode()]).to_pandas(
            types_mapper=pd.ArrowDtype
        )
    )
    for column, values in ((chunked, ["e0", None, "e1"]), (dictionary, ["a", None, "b"])):
        got = _data._from_pandas(column)
        assert got.num_chunks == 1 and got.to_pylist() == values
    codes, names = Trajectories(pd.DataFrame({"step": [1, 1, 2], "engine": chunked})).labels("engine", missing="?")
    assert [names[c] for c in codes] == ["e0", "?", "e1"]


@pytest.mark.parametrize(
    "rows",
    [
        [(3, "b", 1.0), (1, "a", 2.0), (3, "a", 3.0), (2, "B", 4.0)],  # unsorted steps, keys differing by case
        [(5, "timing_s/gen", 0.5)],  # one row
        [(10, "é/x", 1.5), (2, "z", -1.0), (10, "a", 0.0), (7, "a", 2.5)],  # beyond ASCII, a step missing a key
    ],
)
def test_pivot_placed_is_pandas_pivot_of_the_placed_rows(rows):
    long = pd.DataFrame(rows, columns=["step", "key", "value"])
    want = long.pivot(index="step", columns="key", values="value").astype(float).sort_index()
    want.columns.name = None
    got = _data.pivot_placed(long)
    pd.testing.assert_frame_equal(got, want)
    assert got.index.name == "step" and got.columns.name is None


def test_pivot_placed_refuses_two_rows_of_one_step_and_key():
    long = pd.DataFrame({"step": [1, 1], "key": ["a", "a"], "value": [1.0, 2.0]})
    with pytest.raises(ValueError, match="duplicate"):
        _data.pivot_placed(long)


def test_reward_error_codes_are_read_only_where_a_reward_failed(run, tmp_path, monkeypatch):
    reads: list[str] = []
    read_files, scan = RunReader._read_files, RunReader._scan
    monkeypatch.setattr(RunReader, "_read_files", lambda self, *a: reads.extend(a[2]) or read_files(self, *a))
    monkeypatch.setattr(RunReader, "_scan", lambda self, *a, **k: reads.extend(a[2]) or scan(self, *a, **k))
    assert analyze_run(RunReader(run)).rewards.errors.empty  # no reward_status: no error, no code read
    assert "reward" in reads and "reward_error" not in reads
    failed = tmp_path / "failed"
    with Recorder(failed) as rec:
        rows = [
            {"traj_id": str(i), "reward": 0.0, "reward_status": "error", "reward_error": "timeout"} for i in range(2)
        ]
        rec.log_trajectories(1, [*rows, {"traj_id": "2", "reward": 1.0, "reward_status": "ok"}])
    reads.clear()
    errors = analyze_run(RunReader(failed)).rewards.errors
    assert "reward_error" in reads and errors[["code", "count"]].values.tolist() == [["timeout", 2]]


def test_trajectories_line_up_over_the_segments_a_prefetch_reads(run, monkeypatch):
    # diagnose begins the trajectory read before it imports the analysis; a segment landing meanwhile
    # (a live run) must not make the analysis read every column again over the newer listing
    reader = RunReader(run)
    reader.prefetch("trajectories", ["step", "finish_time"])
    with Recorder(run) as rec:
        rec.log_trajectories(3, _rows(3, ["e-a"], [0]))
    scans: list[str] = []
    scan = RunReader._scan
    monkeypatch.setattr(
        RunReader, "_scan", lambda self, table, *a, **k: scans.append(table) or scan(self, table, *a, **k)
    )
    traj = Trajectories(reader)
    assert traj.numbers("step").tolist() == [1, 1, 1, 2, 2, 2]  # the prefetch's segments: step 3 came after
    assert traj.numbers("finish_time").size == 6 and scans == []
    assert len(Trajectories(RunReader(run))) == 7
