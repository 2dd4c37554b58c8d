//! How a file of `num_bytes` is cut into parts: their count, offsets and lengths.

/// Object stores accept at most this many parts per upload; a file that would need more gets
/// larger parts instead (only reachable with a small test part size).
pub(crate) const MAX_PARTS: u64 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub num_bytes: u64,
    pub part_size: u64,
    pub num_parts: u32,
}

impl Layout {
    /// `part_size` is the configured size (at least 1); a 0-byte file is one empty part.
    pub fn new(num_bytes: u64, part_size: u64) -> Layout {
        let part_size = part_size.max(1).max(num_bytes.div_ceil(MAX_PARTS));
        let num_parts = num_bytes.div_ceil(part_size).max(1);
        // MAX_PARTS fits in u32, and so does any count bounded by it.
        let num_parts = u32::try_from(num_parts).unwrap_or(u32::MAX);
        Layout { num_bytes, part_size, num_parts }
    }

    /// `(offset, length)` of a part, numbered from 1; `None` outside the file.
    pub fn range(&self, part_number: u32) -> Option<(u64, u64)> {
        if part_number == 0 || part_number > self.num_parts {
            return None;
        }
        let offset = u64::from(part_number - 1) * self.part_size;
        Some((offset, self.part_size.min(self.num_bytes - offset)))
    }

    pub fn part_numbers(&self) -> impl Iterator<Item = u32> {
        1..=self.num_parts
    }

    /// `simple` when the file fits in one part, as the platform reports it.
    pub fn strategy(&self) -> &'static str {
        if self.num_parts == 1 {
            "simple"
        } else {
            "multipart"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(l: &Layout) -> Vec<(u64, u64)> {
        l.part_numbers().filter_map(|n| l.range(n)).collect()
    }

    #[test]
    fn parts_cover_the_file_exactly() {
        assert_eq!(ranges(&Layout::new(0, 4)), [(0, 0)]);
        assert_eq!(ranges(&Layout::new(1, 4)), [(0, 1)]);
        assert_eq!(ranges(&Layout::new(3, 4)), [(0, 3)]);
        assert_eq!(ranges(&Layout::new(4, 4)), [(0, 4)]);
        assert_eq!(ranges(&Layout::new(5, 4)), [(0, 4), (4, 1)]);
        assert_eq!(ranges(&Layout::new(12, 4)), [(0, 4), (4, 4), (8, 4)]);
        assert_eq!(Layout::new(5, 4).strategy(), "multipart");
        assert_eq!(Layout::new(0, 4).strategy(), "simple");
    }

    #[test]
    fn out_of_range_parts() {
        let l = Layout::new(10, 4);
        assert_eq!(l.range(0), None);
        assert_eq!(l.range(4), None);
        assert_eq!(l.range(3), Some((8, 2)));
    }

    #[test]
    fn huge_files_are_capped_at_max_parts() {
        let l = Layout::new(250_000_000_000, 1024 * 1024);
        assert!(u64::from(l.num_parts) <= MAX_PARTS);
        let (offset, len) = l.range(l.num_parts).unwrap();
        assert_eq!(offset + len, 250_000_000_000);
        assert_eq!(Layout::new(10, 0).part_size, 1);
    }
}
