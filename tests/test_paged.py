"""Paged KV memory: the allocator's books, block tables, copy on write, attention through a table, replays."""
import pytest
import torch

from helpers import s04_paged as pg


def test_allocator_hands_out_every_block_once_then_refuses():
    a = pg.BlockAllocator(4, 16)
    got = [a.allocate() for _ in range(4)]
    assert sorted(got) == [0, 1, 2, 3] and a.used == 4
    with pytest.raises(pg.OutOfBlocks):
        a.allocate()
    a.share(got[1])
    a.release(got[1])
    assert a.used == 4                  # still referenced once
    a.release(got[1])
    assert a.used == 3 and a.allocate() == got[1]
    a.release(got[0])
    with pytest.raises(ValueError, match="already free"):
        a.release(got[0])
    with pytest.raises(ValueError, match="free"):
        a.share(got[0])


def test_bad_sizes_raise_value_errors():
    with pytest.raises(ValueError, match="block_size"):
        pg.BlockAllocator(8, 0)
    with pytest.raises(ValueError, match="block_size"):
        pg.replay([{0: 3}], block_size=0)
    with pytest.raises(ValueError, match="num_blocks"):
        pg.BlockAllocator(0, 16)
    with pytest.raises(ValueError, match="empty"):
        pg.replay([], block_size=16)


@pytest.mark.parametrize("n,bs", [(1, 4), (4, 4), (5, 4), (33, 16), (100, 7)])
def test_table_grows_one_block_per_block_size_tokens(n, bs):
    c = pg.PagedKVCache(64, bs)
    c.add_sequence("a")
    c.append("a", n=n)
    assert len(c.tables["a"]) == pg.blocks_needed(n, bs) == -(-n // bs)
    assert c.allocated_tokens() - c.logical_tokens() == (-n) % bs   # the unfilled tail of the last block


def _scrambled_cache(bs=4, heads=3, d=8, num_blocks=16):
    """A cache whose free list has been stirred, so a sequence's blocks are not adjacent in the pool."""
    c = pg.PagedKVCache(num_blocks, bs, kv_heads=heads, head_dim=d)
    for s in range(num_blocks // 2):          # fill the pool, two blocks per filler
        c.add_sequence(("filler", s))
        c.append(("filler", s), n=2 * bs)
    for s in (5, 1, 6, 2):                    # free blocks 10-11, 2-3, 12-13, 4-5, in that order
        c.free(("filler", s))
    return c


@pytest.mark.parametrize("n", [1, 3, 4, 9, 22])
def test_gather_through_the_table_returns_exactly_what_was_written(n):
    c = _scrambled_cache()
    g = torch.Generator().manual_seed(n)
    k, v = torch.randn(n, 3, 8, generator=g), torch.randn(n, 3, 8, generator=g)
    c.add_sequence("x")
    c.append("x", k[: n // 2], v[: n // 2])       # written in two pieces
    c.append("x", k[n // 2:], v[n // 2:])
    table = c.tables["x"]
    if len(table) > 2:
        assert table[:3] == [10, 11, 2]                            # physically scattered
    gk, gv = c.gather("x")
    assert torch.equal(gk, k) and torch.equal(gv, v)


@pytest.mark.parametrize("n,heads,kv_heads", [(1, 4, 2), (7, 4, 2), (16, 9, 3), (37, 9, 3)])
def test_paged_attention_equals_contiguous_attention(n, heads, kv_heads):
    d, bs = 16, 4
    c = pg.PagedKVCache(32, bs, kv_heads=kv_heads, head_dim=d)
    c.add_sequence("pad")
    c.append("pad", n=5)                  # offset the sequence inside the pool
    g = torch.Generator().manual_seed(n)
    k, v = torch.randn(n, kv_heads, d, generator=g), torch.randn(n, kv_heads, d, generator=g)
    q = torch.randn(heads, d, generator=g)
    c.add_sequence("x")
    c.append("x", k, v)
    # the reference: PyTorch's attention over the contiguous cache, one query token, grouped-query heads
    ref = torch.nn.functional.scaled_dot_product_attention(q[None, :, None], k.transpose(0, 1)[None],
                                                           v.transpose(0, 1)[None], enable_gqa=True)[0, :, 0]
    out = pg.paged_attention(q, c.pool_k, c.pool_v, c.tables["x"], n)
    assert torch.allclose(out, ref, atol=1e-6, rtol=1e-5)
    # and the reference is plain softmax attention, head by head
    h = heads - 1
    kh, vh = k[:, h // (heads // kv_heads)], v[:, h // (heads // kv_heads)]
    assert torch.allclose(ref[h], torch.softmax(kh @ q[h] / d ** 0.5, 0) @ vh, atol=1e-6)


def test_fork_shares_blocks_and_copy_on_write_protects_the_parent():
    bs = 4
    c = pg.PagedKVCache(16, bs, kv_heads=1, head_dim=2)
    g = torch.Generator().manual_seed(0)
    pk, pv = torch.randn(6, 1, 2, generator=g), torch.randn(6, 1, 2, generator=g)   # 1.5 blocks of prefix
    c.add_sequence("sys")
    c.append("sys", pk, pv)
    c.fork("sys", "a")
    c.fork("sys", "b")
    assert c.used_blocks == 2 and c.tables["a"] == c.tables["b"] == c.tables["sys"]
    ak, av = torch.randn(3, 1, 2, generator=g), torch.randn(3, 1, 2, generator=g)
    c.append("a", ak, av)       # writes into the shared half-full block: copied first
    assert c.copies_on_write == 1
    assert c.tables["a"][0] == c.tables["sys"][0] and c.tables["a"][1] != c.tables["sys"][1]
    assert torch.equal(c.gather("sys")[0], pk)                     # parent untouched
    assert torch.equal(c.gather("b")[0], pk)                       # sibling untouched
    assert torch.equal(c.gather("a")[0], torch.cat([pk, ak]))      # child sees prefix + its own tokens
    c.free("a")
    c.free("b")
    assert c.used_blocks == 2                                      # the prefix still holds its own


def test_replay_without_sharing_counts_whole_blocks():
    trace = [{0: 5, 1: 9}, {0: 6, 1: 10, 2: 3}, {1: 11, 2: 4}, {2: 5}, {}]
    r = pg.replay(trace, block_size=4)
    assert r.logical == [14, 19, 15, 5, 0]
    assert r.paged == [4 * (2 + 3), 4 * (2 + 3 + 1), 4 * (3 + 1), 4 * 2, 0]
    assert r.stored == r.logical and r.copies_on_write == 0
    assert all(0 <= f < 1 for f in r.internal_fragmentation)


def test_replay_with_a_shared_prefix_stores_it_once():
    p, bs = 10, 4       # two full shared blocks and a half-full one
    trace = [{0: p + 1, 1: p + 3}, {0: p + 2, 1: p + 4, 2: p + 1}]
    r = pg.replay(trace, block_size=bs, shared_prefix=p)
    assert r.stored == [p + 1 + 3, p + 2 + 4 + 1]
    # prefix: 3 blocks; each request copied the half-full block on its first write (2 tokens there + own)
    assert r.copies_on_write == 3
    assert r.used_blocks == [3 + 1 + 2, 3 + 1 + 2 + 1]
    plain = pg.replay(trace, block_size=bs)
    assert plain.used_blocks == [3 + 4, 3 + 4 + 3]


def test_replay_rejects_a_request_shorter_than_the_prefix():
    with pytest.raises(ValueError, match="prefix"):
        pg.replay([{0: 3}], block_size=4, shared_prefix=5)


def test_reservation_and_prefix_helpers():
    assert pg.reserved_tokens(8, 2048) == 16384
    assert pg.common_prefix_length([[1, 2, 3, 4], [1, 2, 9], [1, 2, 3]]) == 2
    with pytest.raises(ValueError):
        pg.reserved_tokens(0, 2048)


def test_block_owner_grid_marks_prefix_requests_and_free_blocks():
    owners = [[-1, 3, None, None], [-1, 3, 9, None]]          # two steps, four physical blocks
    used, z, text, scale = pg.block_owner_grid(owners, colours=7)
    assert used == [0, 1, 2]                                 # block 3 is never used
    assert z == [[-1, -1], [3, 3], [None, 2]]
    assert text[2] == ["free", "request 9"] and text[0][0] == "shared prefix"
    assert scale[0] == [0.0, "#1a1a1a"] and len(scale) == 2 * 8


def test_prefix_saving_is_the_share_of_paged_memory_sharing_saves():
    p, bs = 10, 4                                   # the trace of the test above: 6 + 7 blocks shared, 7 + 10 not
    trace = [{0: p + 1, 1: p + 3}, {0: p + 2, 1: p + 4, 2: p + 1}]
    plain, share, saved = pg.prefix_saving(trace, p, bs)
    assert (plain.used_blocks, share.used_blocks) == ([7, 10], [6, 7])
    assert saved == pytest.approx(1 - 13 / 17)
    assert pg.prefix_saving(trace, 0, bs)[2] == 0.0   # nothing shared, nothing saved
    assert pg.prefix_saving(trace, 8, bs)[2] == pytest.approx(1 - (5 + 6) / 17)   # whole blocks: no copies
