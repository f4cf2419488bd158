//! Delta debugging: the shortest run of inputs that still fails.

/// A small subsequence of `items` (order kept) that still passes `test`,
/// by Zeller's ddmin: try each of `n` chunks alone, then each chunk's
/// complement, and split finer when neither holds. `test(items)` is taken
/// to hold; `test(&[])` is never asked. The result is 1-minimal for a
/// deterministic `test`: dropping any one item fails. A `test` that has
/// run out of time answers false, which ends the search with what it has.
pub fn ddmin<T: Clone>(items: &[T], mut test: impl FnMut(&[T]) -> bool) -> Vec<T> {
    let mut current = items.to_vec();
    let mut n = 2;
    while current.len() >= 2 {
        let chunks = split(&current, n);
        if let Some(chunk) = chunks.iter().find(|c| test(c)) {
            current = chunk.clone();
            n = 2;
            continue;
        }
        // With two chunks each complement is the other chunk, tried above.
        let complement = (n > 2)
            .then(|| {
                (0..chunks.len())
                    .map(|i| without(&chunks, i))
                    .find(|c| test(c))
            })
            .flatten();
        if let Some(c) = complement {
            current = c;
            n = (n - 1).max(2);
            continue;
        }
        if n >= current.len() {
            break;
        }
        n = (2 * n).min(current.len());
    }
    current
}

/// `items` in `n` chunks of near-equal length, in order.
fn split<T: Clone>(items: &[T], n: usize) -> Vec<Vec<T>> {
    let mut chunks = Vec::with_capacity(n);
    let mut start = 0;
    for i in 0..n {
        let end = start + (items.len() - start) / (n - i);
        chunks.push(items[start..end].to_vec());
        start = end;
    }
    chunks
}

/// Every chunk but `skip`, joined in order.
fn without<T: Clone>(chunks: &[Vec<T>], skip: usize) -> Vec<T> {
    chunks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != skip)
        .flat_map(|(_, c)| c.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Holds when `needed` appear in `items` in that order.
    fn has_in_order(items: &[u32], needed: &[u32]) -> bool {
        let mut rest = items.iter();
        needed.iter().all(|n| rest.any(|i| i == n))
    }

    #[test]
    fn finds_the_items_that_matter_in_order() {
        let items: Vec<u32> = (0..300).collect();
        for needed in [
            vec![17],
            vec![17, 63],
            vec![0, 299],
            vec![5, 6, 7, 200, 201],
        ] {
            let mut tests = 0;
            let found = ddmin(&items, |c| {
                tests += 1;
                has_in_order(c, &needed)
            });
            assert_eq!(found, needed);
            assert!(tests < 200, "{needed:?}: {tests} tests");
        }
    }

    #[test]
    fn a_test_that_needs_a_count_keeps_that_many() {
        // State that builds up: any 3 inputs will do.
        let items: Vec<u32> = (0..40).collect();
        assert_eq!(ddmin(&items, |c| c.len() >= 3).len(), 3);
    }

    #[test]
    fn out_of_time_keeps_what_it_has() {
        let items: Vec<u32> = (0..64).collect();
        let mut left = 3;
        let found = ddmin(&items, |c| {
            left -= 1;
            left >= 0 && c.contains(&9)
        });
        assert!(found.contains(&9) && found.len() < 64, "{found:?}");
    }

    #[test]
    fn chunks_cover_the_items_in_order() {
        let items: Vec<u32> = (0..10).collect();
        assert_eq!(
            split(&items, 3),
            vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7, 8, 9]]
        );
        assert_eq!(without(&split(&items, 3), 1), vec![0, 1, 2, 6, 7, 8, 9]);
    }
}
