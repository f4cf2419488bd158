//! The planted bugs: their names, where each hides and what finding it
//! must show up as. [`super::Zoo`] plants them.

/// A planted bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// size <= 64 with align 16 comes back 8-aligned.
    SmallUnderalign,
    /// size == align == 4096 comes back 2048-aligned.
    SizeEqAlign,
    /// 33..=48-byte blocks: a freed block is handed out again while live.
    DoubleIssue,
    /// 97..=128-byte blocks report 8 bytes more usable than they have.
    UsableOversize,
    /// Growing a block of >= 256 bytes copies 8 bytes too few.
    ShortReallocCopy,
    /// Zeroed 200..=256-byte requests after a free in that class are dirty.
    DirtyZeroed,
    /// calloc's count * size wraps to a small block.
    CallocWrap,
    /// Requests within 64 KiB of isize::MAX succeed.
    HugeSuccess,
    /// 65..=96-byte free list: a stale link written into a live block.
    StaleLink,
    /// A cross-thread free of a 129..=256-byte block frees the freeing
    /// thread's newest block instead.
    XthreadWrongFree,
    /// Deleting a heap with 3 or more blocks frees its largest block.
    HeapDeleteDrops,
    /// A sized free of a heap's block falls through to the global sized
    /// free, which frees it again: only a sized free of a heap block
    /// reaches it.
    HeapSizedFreeTwice,
    /// A zeroed realloc of a heap's block that moves it frees the old
    /// block a second time: only a zeroed realloc of a heap block reaches
    /// it.
    HeapRezallocFreesTwice,
    /// An in-place grow of a heap's block says it grew and does nothing:
    /// only an in-place resize of a heap block reaches it.
    HeapExpandOverclaims,
    /// A heap's block freed from another thread is freed twice (the
    /// remote free is queued on the heap and also done at once): only a
    /// race section's free of a heap block reaches it.
    HeapRemoteFreeTwice,
    /// Shrinking a >= 1 KiB block below half leaks the old block.
    LeakOnShrink,
    /// Every 32,000th call (about every 1,000th op of alloc_ops) keeps 64
    /// bytes more in a slab the allocator maps for them and never frees:
    /// memory it owns (LeakSanitizer does not look there) that grows with
    /// ops, which only the RSS drift workers see.
    SlowLeak,
    /// A free of a 1025..=262144-byte block keeps as many bytes more for
    /// good in a slab the allocator maps (a cache of freed spans with no
    /// bound, never given back): the process grows with every such free.
    /// As `diff_mimalloc`'s reference, what it holds is the reference's.
    HoardedFrees,
    /// Past a million frees of 1..=1024-byte blocks made on another thread
    /// than the one that allocated them, every 8th such free keeps 64
    /// bytes more for good in a slab the allocator maps (a remote-free
    /// node never given back): memory only workloads' cross-thread traffic
    /// grows, seen by the RSS drift workers alone.
    LateRemoteLeak,
    /// A worker thread's (not the allocator's maker's) 2049–2560 B blocks
    /// come from a region split worst fit whose freed chunks are never
    /// merged: a remainder too small for the class is lost for good, so
    /// mixed sizes on worker threads grow the region without bound.
    SplitNeverMerged,
    /// 16385–20480 B blocks are allocated and freed under a lock of the
    /// zoo's own with no fork handler (as is the lock of its bookkeeping,
    /// taken briefly on every free): a fork while another thread holds
    /// one leaves the child a lock no thread will release, and the
    /// child's first request that takes it hangs.
    ForkHeldLock,
    /// A thread's first call gives it a cache of four 24 KiB blocks (for
    /// its 20481–24576 B requests); its exit hook hands them to the other
    /// threads (orphans serve any request up to 24 KiB) and leaves them
    /// listed, stale, for the slot's next thread to clear: an allocation
    /// of any size the exiting thread makes after its hook, from a later
    /// destructor, still pops the cache, and the block is handed out
    /// twice.
    ExitStaleCache,
    /// Growing a block the allocator handed out misaligned copies 4 bytes
    /// too few: a bug only programs that pass a misaligned block (another
    /// bug's violation) reach.
    MisalignedReallocShort,
    /// Requests of 2049..=3072 bytes panic in the size-class lookup.
    PanicClass,
    /// Requests of 3585..=4000 bytes write through a null pointer in the
    /// size-class lookup: a SIGSEGV. ASan reports the deadly signal and
    /// ends the process holding its crash state, so libFuzzer writes no
    /// input: only the soak's input history files it.
    WildWrite,
    /// Growing a 9..=16-byte block copies one byte too few: a second
    /// realloc-prefix bug, in another size tier than `ShortReallocCopy`.
    TinyReallocShort,
    /// 257..=1024-byte blocks live on a free list whose push and pop are a
    /// load and a store instead of a compare-and-swap: only two threads
    /// inside the allocator at once can lose an update (a live block then
    /// comes back from the list).
    RacyFreeList,
    /// 1025..=2048-byte blocks belong to the thread that allocated them;
    /// one freed by any other thread goes onto its owner's remote list,
    /// which the owner's next allocations of the class take first. The
    /// push is a load of the top, a store into that slot and a store of
    /// the top plus one: two remote frees into one owner at once can write
    /// the same slot, and one block is lost (never freed, never handed out
    /// again). Pushes race only each other (the owner's pop locks them
    /// out), so only two threads freeing one owner's blocks at once reach
    /// it; one at a time, every remote free comes back.
    LostRemoteFree,
    /// 4097..=6144-byte blocks go, when freed, into the freeing thread's
    /// cache. An exiting thread abandons its cache: it marks it first, so
    /// others can take its blocks while it drains, then pops its blocks
    /// one at a time and frees them to the base; every allocation of the
    /// class reclaims from an abandoned cache first. A pop is a load of
    /// the top and, after a window, a store of the top minus one: a
    /// reclaimer's pop racing the drain's takes the block the drain frees,
    /// a block handed out live that the base has freed. Only a thread
    /// exiting while others allocate in the class reaches it; a thread
    /// that exits alone drains before anyone looks.
    ExitReclaimRace,
    /// Freeing a 3073..=3584-byte block queues a deferred flush; the flush,
    /// at the allocator's next quiet point (a program's end), corrupts the
    /// size-class table, and the next allocation of 64 bytes or less
    /// panics: in a later input than the one that did the damage, so only
    /// the two replayed in order in one process reproduce it.
    LatentCorruption,
    /// Growing a block of 64 KiB or more leaves 256 bytes of the old
    /// contents uncopied, between where fixed windows would look.
    LargeReallocHole,
    /// Zeroed requests of 128 KiB or more come back with 64 dirty bytes,
    /// between where fixed windows would look.
    LargeDirtyZeroed,
    /// A request of 4 GiB or more is served with its size truncated to 32
    /// bits: only huge requests reach it.
    HugeTruncate,
    /// Once 512 blocks of 17..=256 bytes are live (a full page), the next
    /// of the newest one's size is that block again: only bulk ops hold
    /// that many.
    FullPageReissue,
    /// Once 10,000 blocks of 17..=64 bytes are live, the next request of
    /// the newest one's size is that block again: only a workload holds
    /// that many. Planted in jemalloc, which writes nothing into a freed
    /// small block, so whichever owner frees it last finds the other's
    /// pattern.
    CrowdedReissue,
    /// A zeroed realloc growing a block to 1 KiB or more leaves the last
    /// 16 bytes of the grown part dirty.
    RezallocDirty,
    /// An in-place resize of a 65..=4096-byte block claims up to twice
    /// its usable size.
    ExpandOverclaims,
    /// A sized free of a 17..=8192-byte block files it on one list for
    /// the whole range: the next request in the range gets it, too small
    /// if it asks for more.
    SizedFreeMisclass,
    /// A plain realloc of a block aligned to 64 or more returns a block 8
    /// bytes off malloc's alignment.
    PlainReallocMisaligns,
    /// `realloc(NULL, n)` for 1..=64 bytes returns null.
    ReallocNullFails,
    /// `free(NULL)` panics.
    FreeNullPanics,
    /// The good size of a 100..=200-byte request is the request rounded up
    /// to 16, whatever the block really gets.
    GoodSizeLies,
    /// A purge with delay 0 zeroes the pages inside the newest live block
    /// of 4 KiB or more.
    PurgeDropsLive,
    /// A purge with delay 0 gives the pages inside the newest live block
    /// of 4 KiB or more back lazily (`MADV_FREE`): they read right until
    /// the kernel reclaims them.
    PurgeLazyFreesLive,
    /// A freed 256..=65536-byte block is cached for the next request it
    /// holds, and that allocation calls the allocator's hook between
    /// taking the block and clearing the cache: an allocation from inside
    /// the hook gets the same block.
    HookReentryReissue,
    /// A purge asked for with no delay runs with the allocator's usual
    /// one (ten seconds: it decays, it does not purge), so the pages
    /// freed in the last seconds stay resident: planted in jemalloc,
    /// whose own count of dirty pages shows them. No live block is on
    /// them: only the count read after a forced purge sees it.
    PurgeIgnoresDelay,
    /// A request of 256 KiB or more that the OS layer refuses
    /// (`os-fail`) keeps the reservation it made for it: planted in
    /// jemalloc, whose own count of bytes in use shows the loss.
    OsFailLeaks,
    /// Shrinking a 2049..=4096-byte block below half never returns 64
    /// bytes of the split-off tail to the arena: planted in `arena`, whose
    /// capacity then shrinks a little with every such realloc.
    CapacityLeak,
    /// 65..=4096-byte blocks get room up to a multiple of 64 bytes; a
    /// zeroed realloc within the room stays in place and zeroes from the
    /// room on (the old usable size: mimalloc's documented promise, not
    /// the zoo's, which is every byte past the old request), so the bytes
    /// between the old request and the new one keep what they held.
    RegrowStale,
    /// mimalloc#63's and #763's shapes: 65..=4096-byte blocks get room up
    /// to a multiple of 64 bytes (as for `RegrowStale`); a zeroed request
    /// zeroes only the bytes asked for, not the rest of its room; a zeroed
    /// realloc within the room stays in place and zeroes nothing, and one
    /// that moves zeroes the new block only up to the new request. While
    /// it is planted the zoo promises only what mimalloc documents
    /// (`ZeroedFrom::Written`): a block allocated zeroed keeps zero past
    /// what the program wrote. A zeroed block grown within its room shows
    /// the stale room: only a check that follows a zeroed block past its
    /// request sees it (the old usable size's promise starts past the
    /// room).
    RezallocMovedSlack,
    /// A freed block of more than 32 MiB is kept, and the next zeroed request
    /// that fits gets it back as it was left, not zeroed: only a program
    /// that frees one such block and asks for another reaches it (two are
    /// more than a program may hold at once).
    LargeReuseDirty,
    /// A huge block (over 64 MiB) keeps its size in a footer over its
    /// last 8 bytes, and a zeroed one, fresh from the OS, is not cleared
    /// there: only a zeroed huge request reaches it.
    HugeZeroedFooter,
    /// A plain malloc of 257..=4095 bytes that is 2 to 14 bytes past a
    /// multiple of 16 gets the class below: the fast path's bin lookup
    /// rounds down between the size edges (realloc and calloc take the
    /// computed bin). Only a size drawn inside a class reaches it: every
    /// edge a program names (16·k ± 1, 2^e ± 1, quarter octaves) is within
    /// 1 of a multiple of 16.
    InteriorClass,
    /// Every request aligned to 32 or more comes back 16 bytes past an
    /// aligned address, at every entry point (alloc, zeroed, realloc, the
    /// aligned optional calls) and every size: one line of the
    /// allocator, reached by every op family, size tier and target.
    AlignIgnored,
    /// A zeroed request of 6145..=8192 bytes on any thread but the one
    /// that made the allocator is served from that thread's free list
    /// and zeroed all but the list's link in its first word: only a
    /// zeroed request on another thread (a race section's) reaches it.
    XthreadZeroedLink,
    /// 8193..=12288-byte blocks get 8 bytes of room past their request,
    /// where the allocator keeps a footer it checks at free (and panics
    /// on, as a hardened allocator aborts), yet reports the room as
    /// usable: only a harness that writes the whole usable size of the
    /// block (a usable-size probe, or the slack of a new block) reaches it.
    SlackFooter,
    /// A realloc of a huge block (over 64 MiB) aligned to more than a page
    /// to another huge size moves it to an address only page-aligned (as
    /// `mremap` picks one): only a huge block kept and reallocated with
    /// its alignment reaches it.
    HugeReallocMisaligns,
    /// A realloc that crosses 64 MiB, from a normal size to a huge one or
    /// back, moves the block by another path (as a large allocator hands
    /// a block to its OS layer) that copies a page less than it must:
    /// only a normal block reallocated to a huge size, or a huge one
    /// reallocated down to a normal size, reaches it.
    HugeCrossShort,
    /// A free of a 12289..=16384-byte block made on any thread but the
    /// one that made the allocator is dropped: the block stays allocated
    /// in the base for good. Planted in jemalloc, whose blocks nothing can
    /// walk: only its own count of bytes in use shows the loss.
    DroppedRemoteFree,
    /// A new block of 4..=64 MiB whose size is not within 1 of a multiple
    /// of 64 KiB reports a usable size rounded down to one (its span
    /// counted in whole 64 KiB pages, truncated), but not one that calloc
    /// or realloc asked for: only a plain request's size drawn inside a
    /// large octave reaches it, as every edge a program names up there is
    /// within 1 of such a multiple.
    LargeInteriorSpan,
    /// 16..=128-byte frees wait in a cache in front of glibc that caches
    /// a block freed twice twice: the double free glibc stops, it lets by.
    CacheMissesDoubleFree,
    /// 129..=256-byte frees wait in a cache in front of glibc whose links
    /// are plain pointers: a pointer written into a freed block is handed
    /// out.
    CacheRawLinks,
    /// 257..=1024-byte frees wait in a cache in front of glibc that asks
    /// glibc about a pointer only outside the span of its blocks: a free
    /// of a pointer inside a live block caches memory still in use.
    CacheTrustsSpan,
    /// 1025..=8192-byte blocks, in front of jemalloc, carry their length
    /// in a header that a free trusts: an overflow that grows it makes
    /// the block handed out over its neighbour.
    CacheTrustsHeader,
    /// As `CacheTrustsHeader`, with a guard word before each header that
    /// a free checks: an overflow from the block before is stopped, a
    /// write to the header alone (`header-write`) is not.
    CacheGuardsHeader,
    /// Blocks planted in `arena` are handed out through a reference to
    /// their first byte: the same address, but under Rust's aliasing
    /// rules a pointer that may touch that byte only. Natively nothing
    /// differs; only Miri (`allocsoak miri`) sees a write past it.
    NarrowProvenance,
}

impl Bug {
    pub const ALL: [Bug; 66] = [
        Bug::SmallUnderalign,
        Bug::SizeEqAlign,
        Bug::DoubleIssue,
        Bug::UsableOversize,
        Bug::ShortReallocCopy,
        Bug::DirtyZeroed,
        Bug::CallocWrap,
        Bug::HugeSuccess,
        Bug::StaleLink,
        Bug::XthreadWrongFree,
        Bug::HeapDeleteDrops,
        Bug::HeapSizedFreeTwice,
        Bug::HeapRezallocFreesTwice,
        Bug::HeapExpandOverclaims,
        Bug::HeapRemoteFreeTwice,
        Bug::LeakOnShrink,
        Bug::MisalignedReallocShort,
        Bug::PanicClass,
        Bug::WildWrite,
        Bug::TinyReallocShort,
        Bug::RacyFreeList,
        Bug::LostRemoteFree,
        Bug::ExitReclaimRace,
        Bug::LatentCorruption,
        Bug::LargeReallocHole,
        Bug::LargeDirtyZeroed,
        Bug::HugeTruncate,
        Bug::FullPageReissue,
        Bug::CrowdedReissue,
        Bug::RezallocDirty,
        Bug::RegrowStale,
        Bug::RezallocMovedSlack,
        Bug::LargeReuseDirty,
        Bug::HugeZeroedFooter,
        Bug::InteriorClass,
        Bug::ExpandOverclaims,
        Bug::SizedFreeMisclass,
        Bug::PlainReallocMisaligns,
        Bug::ReallocNullFails,
        Bug::FreeNullPanics,
        Bug::GoodSizeLies,
        Bug::PurgeDropsLive,
        Bug::PurgeLazyFreesLive,
        Bug::PurgeIgnoresDelay,
        Bug::HookReentryReissue,
        Bug::OsFailLeaks,
        Bug::CapacityLeak,
        Bug::SlowLeak,
        Bug::HoardedFrees,
        Bug::LateRemoteLeak,
        Bug::SplitNeverMerged,
        Bug::ForkHeldLock,
        Bug::ExitStaleCache,
        Bug::AlignIgnored,
        Bug::XthreadZeroedLink,
        Bug::SlackFooter,
        Bug::HugeReallocMisaligns,
        Bug::HugeCrossShort,
        Bug::DroppedRemoteFree,
        Bug::LargeInteriorSpan,
        Bug::CacheMissesDoubleFree,
        Bug::CacheRawLinks,
        Bug::CacheTrustsSpan,
        Bug::CacheTrustsHeader,
        Bug::CacheGuardsHeader,
        Bug::NarrowProvenance,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Bug::SmallUnderalign => "small-underalign",
            Bug::SizeEqAlign => "size-eq-align",
            Bug::DoubleIssue => "double-issue",
            Bug::UsableOversize => "usable-oversize",
            Bug::ShortReallocCopy => "short-realloc-copy",
            Bug::DirtyZeroed => "dirty-zeroed",
            Bug::CallocWrap => "calloc-wrap",
            Bug::HugeSuccess => "huge-success",
            Bug::StaleLink => "stale-link",
            Bug::XthreadWrongFree => "xthread-wrong-free",
            Bug::HeapDeleteDrops => "heap-delete-drops",
            Bug::HeapSizedFreeTwice => "heap-sized-free-twice",
            Bug::HeapRezallocFreesTwice => "heap-rezalloc-frees-twice",
            Bug::HeapExpandOverclaims => "heap-expand-overclaims",
            Bug::HeapRemoteFreeTwice => "heap-remote-free-twice",
            Bug::LeakOnShrink => "leak-on-shrink",
            Bug::MisalignedReallocShort => "misaligned-realloc-short",
            Bug::PanicClass => "panic-class",
            Bug::WildWrite => "wild-write",
            Bug::TinyReallocShort => "tiny-realloc-short",
            Bug::RacyFreeList => "racy-free-list",
            Bug::LostRemoteFree => "lost-remote-free",
            Bug::ExitReclaimRace => "exit-reclaim-race",
            Bug::LatentCorruption => "latent-corruption",
            Bug::LargeReallocHole => "large-realloc-hole",
            Bug::LargeDirtyZeroed => "large-dirty-zeroed",
            Bug::HugeTruncate => "huge-truncate",
            Bug::FullPageReissue => "full-page-reissue",
            Bug::CrowdedReissue => "crowded-reissue",
            Bug::RezallocDirty => "rezalloc-dirty",
            Bug::RegrowStale => "regrow-stale",
            Bug::RezallocMovedSlack => "rezalloc-moved-slack",
            Bug::LargeReuseDirty => "large-reuse-dirty",
            Bug::HugeZeroedFooter => "huge-zeroed-footer",
            Bug::InteriorClass => "interior-class",
            Bug::ExpandOverclaims => "expand-overclaims",
            Bug::SizedFreeMisclass => "sized-free-misclass",
            Bug::PlainReallocMisaligns => "plain-realloc-misaligns",
            Bug::ReallocNullFails => "realloc-null-fails",
            Bug::FreeNullPanics => "free-null-panics",
            Bug::GoodSizeLies => "good-size-lies",
            Bug::PurgeDropsLive => "purge-drops-live",
            Bug::PurgeLazyFreesLive => "purge-lazy-frees-live",
            Bug::PurgeIgnoresDelay => "purge-ignores-delay",
            Bug::HookReentryReissue => "hook-reentry-reissue",
            Bug::OsFailLeaks => "os-fail-leaks",
            Bug::CapacityLeak => "capacity-leak",
            Bug::SlowLeak => "slow-leak",
            Bug::HoardedFrees => "hoarded-frees",
            Bug::LateRemoteLeak => "late-remote-leak",
            Bug::SplitNeverMerged => "split-never-merged",
            Bug::ForkHeldLock => "fork-held-lock",
            Bug::ExitStaleCache => "exit-stale-cache",
            Bug::AlignIgnored => "align-ignored",
            Bug::XthreadZeroedLink => "xthread-zeroed-link",
            Bug::DroppedRemoteFree => "dropped-remote-free",
            Bug::CacheMissesDoubleFree => "cache-misses-double-free",
            Bug::CacheRawLinks => "cache-raw-links",
            Bug::CacheTrustsSpan => "cache-trusts-span",
            Bug::CacheTrustsHeader => "cache-trusts-header",
            Bug::CacheGuardsHeader => "cache-guards-header",
            Bug::NarrowProvenance => "narrow-provenance",
            Bug::LargeInteriorSpan => "large-interior-span",
            Bug::SlackFooter => "slack-footer",
            Bug::HugeReallocMisaligns => "huge-realloc-misaligns",
            Bug::HugeCrossShort => "huge-cross-short",
        }
    }

    /// The bug this one hides behind and the tolerate pattern that gets
    /// past it: the zoo plants both and runs with that pattern, as a soak
    /// does once the first is filed.
    pub fn behind(self) -> Option<(Bug, &'static str)> {
        match self {
            Bug::MisalignedReallocShort => Some((Bug::SmallUnderalign, "alignment in *")),
            _ => None,
        }
    }

    /// The allocator `zoo:<bug>` plants the bug in when the name gives
    /// none: `system`, or `arena` for a bug only a fixed region shows.
    pub fn base(self) -> &'static str {
        match self {
            Bug::CapacityLeak | Bug::NarrowProvenance => "arena",
            Bug::DroppedRemoteFree
            | Bug::CrowdedReissue
            | Bug::LateRemoteLeak
            | Bug::PurgeIgnoresDelay
            | Bug::OsFailLeaks
            | Bug::CacheTrustsHeader
            | Bug::CacheGuardsHeader => "jemalloc",
            Bug::SplitNeverMerged => "mimalloc",
            Bug::CacheMissesDoubleFree | Bug::CacheRawLinks | Bug::CacheTrustsSpan => "glibc",
            _ => "system",
        }
    }

    /// The target whose ops reach the bug.
    pub fn target(self) -> shadow::Target {
        match self {
            Bug::XthreadWrongFree
            | Bug::RacyFreeList
            | Bug::LostRemoteFree
            | Bug::ExitReclaimRace
            | Bug::XthreadZeroedLink
            | Bug::DroppedRemoteFree
            | Bug::ForkHeldLock
            | Bug::ExitStaleCache => shadow::Target::MtOps,
            Bug::HeapDeleteDrops
            | Bug::HeapSizedFreeTwice
            | Bug::HeapRezallocFreesTwice
            | Bug::HeapExpandOverclaims
            | Bug::HeapRemoteFreeTwice => shadow::Target::HeapApi,
            Bug::CrowdedReissue | Bug::LateRemoteLeak | Bug::SplitNeverMerged => {
                shadow::Target::Workload
            }
            _ => shadow::Target::AllocOps,
        }
    }

    /// The finding kinds the bug may show up as: violation kinds, or the
    /// sanitizer's error type where ASan sees it first. The first is the
    /// usual one.
    pub fn expected_kinds(self) -> &'static [&'static str] {
        match self {
            // Another thread's bugs: a table of their own (`threaded_kinds.rs`).
            Bug::XthreadWrongFree
            | Bug::ForkHeldLock
            | Bug::ExitStaleCache
            | Bug::RacyFreeList
            | Bug::LostRemoteFree
            | Bug::ExitReclaimRace => self.threaded_kinds(),
            Bug::SmallUnderalign | Bug::SizeEqAlign => &["alignment"],
            Bug::DoubleIssue => &["overlap"],
            // ASan poisons past the block's real end, which the usable
            // size is checked against; without ASan, a neighbour's
            // contents show it.
            Bug::UsableOversize => &["usable-size", "heap-buffer-overflow", "contents"],
            Bug::ShortReallocCopy => &["realloc-prefix"],
            Bug::DirtyZeroed => &["zeroed"],
            Bug::CallocWrap => &["calloc-overflow"],
            Bug::HugeSuccess => &["impossible-success"],
            // The stale link lands in whatever block was popped last; when
            // that block is a realloc's new home, the realloc check sees it.
            Bug::StaleLink => &["contents", "realloc-prefix"],
            Bug::HeapDeleteDrops => &["heap-use-after-free"],
            Bug::HeapSizedFreeTwice | Bug::HeapRezallocFreesTwice | Bug::HeapRemoteFreeTwice => {
                &["double-free"]
            }
            Bug::LeakOnShrink => &["leak"],
            Bug::MisalignedReallocShort
            | Bug::TinyReallocShort
            | Bug::LargeReallocHole
            | Bug::HugeCrossShort => &["realloc-prefix"],
            Bug::LargeDirtyZeroed
            | Bug::RezallocDirty
            | Bug::RegrowStale
            | Bug::RezallocMovedSlack
            | Bug::LargeReuseDirty
            | Bug::HugeZeroedFooter
            | Bug::XthreadZeroedLink => &["zeroed"],
            Bug::HugeTruncate
            | Bug::ExpandOverclaims
            | Bug::InteriorClass
            | Bug::LargeInteriorSpan => &["usable-size"],
            // Or ASan's report of the harness writing the bytes it was
            // told it owns.
            Bug::HeapExpandOverclaims => &["usable-size", "heap-buffer-overflow"],
            // Or ASan's report of the zoo's own plain realloc copying into
            // the too-small block, before the harness sees it.
            Bug::SizedFreeMisclass => &["usable-size", "heap-buffer-overflow"],
            Bug::FullPageReissue => &["overlap"],
            Bug::CrowdedReissue => &["contents"],
            Bug::PlainReallocMisaligns | Bug::AlignIgnored | Bug::HugeReallocMisaligns => {
                &["alignment"]
            }
            Bug::ReallocNullFails => &["null"],
            Bug::FreeNullPanics => &["panic"],
            Bug::GoodSizeLies => &["good-size"],
            Bug::PurgeDropsLive => &["contents"],
            Bug::PurgeLazyFreesLive => &["released-live"],
            Bug::PurgeIgnoresDelay => &["purge-kept"],
            Bug::HookReentryReissue => &["overlap"],
            Bug::CapacityLeak => &["capacity-leak"],
            Bug::CacheMissesDoubleFree
            | Bug::CacheRawLinks
            | Bug::CacheTrustsSpan
            | Bug::CacheTrustsHeader
            | Bug::CacheGuardsHeader => &["hardening"],
            Bug::DroppedRemoteFree | Bug::OsFailLeaks => &["kept-bytes"],
            Bug::SlowLeak | Bug::LateRemoteLeak | Bug::SplitNeverMerged => &["rss-drift"],
            Bug::HoardedFrees => &["held", "oom", "rss-drift"],
            Bug::NarrowProvenance => &["miri-ub"],
            Bug::PanicClass | Bug::LatentCorruption | Bug::SlackFooter => &["panic"],
            Bug::WildWrite => &["SEGV"],
        }
    }

    /// Whether the bug must make the process fail (a leak need not).
    pub fn must_crash(self) -> bool {
        !matches!(
            self,
            Bug::LeakOnShrink
                | Bug::SlowLeak
                | Bug::HoardedFrees
                | Bug::LateRemoteLeak
                | Bug::SplitNeverMerged
        )
    }

    /// Whether only the RSS drift workers can see the bug: no fuzz binary
    /// reports it, so the fuzzing zoo leaves it out.
    pub fn drift_only(self) -> bool {
        matches!(
            self,
            Bug::SlowLeak | Bug::LateRemoteLeak | Bug::SplitNeverMerged
        )
    }

    /// Whether only Miri can see the bug (`allocsoak miri`): the fuzzing
    /// zoo leaves it out too.
    pub fn miri_only(self) -> bool {
        self == Bug::NarrowProvenance
    }

    /// Whether the bug is planted in `diff_mimalloc`'s reference, not in
    /// an allocator under test (soak/tests/past_first_bug.rs): the fuzzing
    /// zoo leaves it out too.
    pub fn reference_only(self) -> bool {
        self == Bug::HoardedFrees
    }
}
