//! Sparse byte-addressable memory: pages are allocated on first write, so registering a
//! 64 GB region costs only what is written. Unwritten bytes read as zero.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const PAGE_SHIFT: u32 = 12;
/// Page size of the sparse store.
pub const PAGE_BYTES: u64 = 1 << PAGE_SHIFT;

/// A hasher for `u64` keys (page numbers, line addresses) on the simulator's hot paths:
/// one multiply spreads them well. For lookups only: no map using it is ever iterated
/// into a result.
#[derive(Default)]
pub struct U64Hasher(u64);
impl Hasher for U64Hasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ *b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type Page = Box<[u8; PAGE_BYTES as usize]>;

/// `dst.copy_from_slice(src)`, with a whole cache line (every write of a stream) copied
/// as a fixed-size array: a few vector moves inline instead of a call to `memcpy`, which
/// the hierarchy pays three times per streamed line.
#[inline]
pub fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    match (
        <&mut [u8; 64]>::try_from(&mut *dst),
        <&[u8; 64]>::try_from(src),
    ) {
        (Ok(d), Ok(s)) => *d = *s,
        _ => dst.copy_from_slice(src),
    }
}

/// No page: the cache of [`SparseMem::last`] starts empty.
const NO_PAGE: (u64, u32) = (u64::MAX, u32::MAX);

/// A sparse memory image. Pages live in a hash map for speed; everything that leaves this
/// type ([`digest`](Self::digest)) walks pages in address order, so no hash order reaches
/// a result.
#[derive(Clone)]
pub struct SparseMem {
    /// Page number to its slot in `pages`.
    index: HashMap<u64, u32, BuildHasherDefault<U64Hasher>>,
    pages: Vec<Page>,
    /// Each slot's page number (so a dropped page's slot can be refilled by the last).
    numbers: Vec<u64>,
    /// The page written last (number, slot): the simulator writes rings and logs line by
    /// line, so most writes land in the page before and skip the hash lookup.
    last: (u64, u32),
}

impl Default for SparseMem {
    fn default() -> Self {
        SparseMem {
            index: HashMap::default(),
            pages: Vec::new(),
            numbers: Vec::new(),
            last: NO_PAGE,
        }
    }
}

/// Equal images hold the same bytes (a page of zeros equals no page).
impl PartialEq for SparseMem {
    fn eq(&self, other: &Self) -> bool {
        let zero = [0u8; PAGE_BYTES as usize];
        let covers = |a: &SparseMem, b: &SparseMem| {
            a.index.iter().all(|(k, &slot)| {
                let mine = &a.pages[slot as usize][..];
                match b.index.get(k) {
                    Some(&s) => mine == &b.pages[s as usize][..],
                    None => mine == &zero[..],
                }
            })
        };
        covers(self, other) && covers(other, self)
    }
}
impl Eq for SparseMem {}

impl std::fmt::Debug for SparseMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SparseMem({} pages)", self.index.len())
    }
}

impl SparseMem {
    /// An all-zero memory.
    pub fn new() -> Self {
        Self::default()
    }

    fn page(&self, number: u64) -> Option<&Page> {
        self.index
            .get(&number)
            .map(|&slot| &self.pages[slot as usize])
    }

    /// The page `number` for writing, created by `init` if absent.
    fn page_mut(&mut self, number: u64, init: impl FnOnce() -> Page) -> &mut Page {
        if self.last.0 != number {
            let slot = match self.index.get(&number) {
                Some(&slot) => slot,
                None => {
                    let slot = self.pages.len() as u32;
                    self.pages.push(init());
                    self.numbers.push(number);
                    self.index.insert(number, slot);
                    slot
                }
            };
            self.last = (number, slot);
        }
        &mut self.pages[self.last.1 as usize]
    }

    /// Copies `buf.len()` bytes starting at `addr` into `buf`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) {
        let mut done = 0usize;
        while done < buf.len() {
            let a = addr + done as u64;
            let off = (a & (PAGE_BYTES - 1)) as usize;
            let n = (PAGE_BYTES as usize - off).min(buf.len() - done);
            match self.page(a >> PAGE_SHIFT) {
                Some(p) => buf[done..done + n].copy_from_slice(&p[off..off + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
        }
    }

    /// Writes `data` at `addr`.
    pub fn write(&mut self, addr: u64, data: &[u8]) {
        let off = (addr & (PAGE_BYTES - 1)) as usize;
        if off + data.len() <= PAGE_BYTES as usize {
            // Within one page (every cache line): no loop.
            let page = self.page_mut(addr >> PAGE_SHIFT, || Box::new([0u8; PAGE_BYTES as usize]));
            copy_bytes(&mut page[off..off + data.len()], data);
            return;
        }
        let mut done = 0usize;
        while done < data.len() {
            let a = addr + done as u64;
            let off = (a & (PAGE_BYTES - 1)) as usize;
            let n = (PAGE_BYTES as usize - off).min(data.len() - done);
            let page = self.page_mut(a >> PAGE_SHIFT, || Box::new([0u8; PAGE_BYTES as usize]));
            page[off..off + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
    }

    /// Like [`read`](Self::read), but pages this memory does not hold come from `base`
    /// (an overlay over another image).
    pub fn read_over(&self, addr: u64, buf: &mut [u8], base: &dyn PmMedia) {
        let mut done = 0usize;
        while done < buf.len() {
            let a = addr + done as u64;
            let off = (a & (PAGE_BYTES - 1)) as usize;
            let n = (PAGE_BYTES as usize - off).min(buf.len() - done);
            match self.page(a >> PAGE_SHIFT) {
                Some(p) => buf[done..done + n].copy_from_slice(&p[off..off + n]),
                None => base.read(a, &mut buf[done..done + n]),
            }
            done += n;
        }
    }

    /// Like [`write`](Self::write), but a page this memory does not hold yet starts as
    /// `base`'s copy of it (copy-on-write overlay).
    /// Inlined for its common case, the page written last (every line of a stream but
    /// the first of each page); the rest is out of line.
    #[inline]
    pub fn write_over(&mut self, addr: u64, data: &[u8], base: &dyn PmMedia) {
        let off = (addr & (PAGE_BYTES - 1)) as usize;
        if off + data.len() <= PAGE_BYTES as usize && self.last.0 == addr >> PAGE_SHIFT {
            // The page written last (the common case): no loop, no lookup.
            copy_bytes(
                &mut self.pages[self.last.1 as usize][off..off + data.len()],
                data,
            );
            return;
        }
        self.write_over_pages(addr, data, base);
    }

    /// [`write_over`](Self::write_over) page by page, through the page index.
    #[inline(never)]
    fn write_over_pages(&mut self, addr: u64, data: &[u8], base: &dyn PmMedia) {
        let mut done = 0usize;
        while done < data.len() {
            let a = addr + done as u64;
            let off = (a & (PAGE_BYTES - 1)) as usize;
            let n = (PAGE_BYTES as usize - off).min(data.len() - done);
            let page = self.page_mut(a >> PAGE_SHIFT, || {
                let mut p = Box::new([0u8; PAGE_BYTES as usize]);
                base.read(a & !(PAGE_BYTES - 1), &mut p[..]);
                p
            });
            page[off..off + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
    }

    /// Reads `len` bytes into a new vector.
    pub fn read_vec(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.read(addr, &mut v);
        v
    }

    /// Reads a little-endian `u64`.
    pub fn read_u64(&self, addr: u64) -> u64 {
        let mut b = [0u8; 8];
        self.read(addr, &mut b);
        u64::from_le_bytes(b)
    }

    /// Bytes actually allocated.
    pub fn resident_bytes(&self) -> u64 {
        self.index.len() as u64 * PAGE_BYTES
    }

    /// Makes `addr..addr+len` read as zero, and, for an overlay, read through to its base:
    /// whole pages in the range are dropped (freeing their memory), the parts of pages at
    /// its ends are zeroed. Costs a lookup per page of the range, nothing per byte.
    pub fn zero_range(&mut self, addr: u64, len: u64) {
        let end = addr.saturating_add(len);
        let mut a = addr;
        while a < end {
            let number = a >> PAGE_SHIFT;
            let page_end = (number + 1) << PAGE_SHIFT;
            let n = (page_end.min(end) - a) as usize;
            if let Some(&slot) = self.index.get(&number) {
                if n == PAGE_BYTES as usize {
                    self.drop_page(number, slot);
                } else {
                    let off = (a & (PAGE_BYTES - 1)) as usize;
                    self.pages[slot as usize][off..off + n].fill(0);
                }
            }
            a += n as u64;
        }
    }

    /// Removes page `number` (in `slot`): the last page takes its slot.
    fn drop_page(&mut self, number: u64, slot: u32) {
        self.index.remove(&number);
        self.pages.swap_remove(slot as usize);
        self.numbers.swap_remove(slot as usize);
        if let Some(&moved) = self.numbers.get(slot as usize) {
            *self.index.get_mut(&moved).expect("every page is indexed") = slot;
        }
        self.last = NO_PAGE;
    }

    /// Forgets everything (a DRAM power loss).
    pub fn clear(&mut self) {
        self.index.clear();
        self.pages.clear();
        self.numbers.clear();
        self.last = NO_PAGE;
    }

    /// A 64-bit FNV-1a digest of the non-zero pages, for comparing images cheaply.
    pub fn digest(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut keys: Vec<(&u64, &u32)> = self.index.iter().collect();
        keys.sort_unstable();
        for (k, &slot) in keys {
            let p = &self.pages[slot as usize];
            if p.iter().all(|&b| b == 0) {
                continue;
            }
            for b in k.to_le_bytes().iter().chain(p.iter()) {
                h ^= *b as u64;
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        h
    }
}

/// The persistent medium under the model's PM: whatever it holds survives a crash. The
/// memory hierarchy writes a line here at the instant the line enters the configured
/// persistence domain, so the medium always holds exactly the image a crash would leave.
/// The simulator uses a [`SparseMem`]; the soft RNIC a memory-mapped pool file.
pub trait PmMedia: std::fmt::Debug + Send {
    /// Reads what is stored at `addr` (a PM physical address).
    fn read(&self, addr: u64, buf: &mut [u8]);
    /// Stores `data` at `addr`. It survives the process dying at once; it survives the
    /// machine crashing after the next [`sync`](Self::sync).
    fn write(&mut self, addr: u64, data: &[u8]);
    /// Makes every write so far survive a crash of the machine (e.g. `msync`). A runtime
    /// calls it before anything that depends on those writes leaves the process.
    fn sync(&mut self) {}
    /// A copy of the whole medium (for crash images and inspection).
    fn snapshot(&self) -> SparseMem;
}

impl PmMedia for SparseMem {
    fn read(&self, addr: u64, buf: &mut [u8]) {
        SparseMem::read(self, addr, buf);
    }
    fn write(&mut self, addr: u64, data: &[u8]) {
        SparseMem::write(self, addr, data);
    }
    fn snapshot(&self) -> SparseMem {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn huge_addresses_cost_only_what_is_written() {
        let mut m = SparseMem::new();
        let far = 60 << 30; // 60 GiB into a region
        m.write(far - 3, b"across a page");
        assert_eq!(m.read_vec(far - 3, 13), b"across a page");
        assert_eq!(m.resident_bytes(), 2 * PAGE_BYTES);
        assert_eq!(m.read_vec(5, 4), vec![0; 4]);
    }

    #[test]
    fn an_overlay_reads_through_to_its_base_until_written() {
        let mut base = SparseMem::new();
        base.write(100, b"base bytes");
        let mut top = SparseMem::new();
        let mut buf = [0u8; 10];
        top.read_over(100, &mut buf, &base);
        assert_eq!(&buf, b"base bytes");
        top.write_over(104, b"TOP", &base);
        top.read_over(100, &mut buf, &base);
        assert_eq!(&buf, b"baseTOPtes");
        assert_eq!(
            base.read_vec(100, 10),
            b"base bytes",
            "the base is untouched"
        );
    }

    proptest! {
        /// Zeroed ranges (whole pages dropped, ends zeroed) read as zero, over a base too,
        /// and everything else keeps its bytes, with writes before and after.
        #[test]
        fn a_zeroed_range_reads_as_zero_and_nothing_else_moves(
            ops in prop::collection::vec((0u64..40_000, 0usize..9_000, any::<u8>(), any::<bool>()), 0..40)
        ) {
            let mut base = SparseMem::new();
            base.write(0, &[0x5a; 50_000]);
            let mut m = SparseMem::new();
            let mut flat = vec![0x5a; 50_000];
            for (addr, len, byte, zero) in ops {
                let (a, n) = (addr as usize, len);
                if zero {
                    m.zero_range(addr, len as u64);
                    base.write(addr, &vec![0; n]);
                    flat[a..a + n].fill(0);
                } else {
                    m.write_over(addr, &vec![byte; n], &base);
                    flat[a..a + n].fill(byte);
                }
                let mut got = vec![0u8; flat.len()];
                m.read_over(0, &mut got, &base);
                prop_assert_eq!(&got, &flat);
            }
        }

        #[test]
        fn behaves_like_a_flat_array(ops in prop::collection::vec((0u64..20_000, prop::collection::vec(any::<u8>(), 0..300)), 0..40)) {
            let mut m = SparseMem::new();
            let mut flat = vec![0u8; 20_400];
            for (addr, data) in &ops {
                m.write(*addr, data);
                flat[*addr as usize..*addr as usize + data.len()].copy_from_slice(data);
            }
            prop_assert_eq!(m.read_vec(0, flat.len()), flat);
        }
    }
}
