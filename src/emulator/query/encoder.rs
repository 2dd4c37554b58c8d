//! The stand-in encoder: every channel window is fitted to 1024 points and put through a fixed
//! fast Johnson-Lindenstrauss transform (random signs, an orthonormal Walsh-Hadamard transform,
//! then 768 fixed coordinates; fixed seed). The first two steps keep distances and angles
//! exactly and the subsample keeps them closely, so similar windows get similar embeddings and
//! nearest-neighbour pipelines built on the emulator behave sensibly. It replaced a dense
//! 768 x 1024 Gaussian projection that cost ~7 ms of CPU per (8, 1024) call, which made the
//! emulator, not the client, the measured cost in the embeddings benchmark.

use std::sync::OnceLock;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const EMBEDDING_DIM: usize = 768;
pub const WINDOW_POINTS: usize = 1024;
/// Fixed so the same window gives the same embedding in every process and version.
const PROJECTION_SEED: u64 = 0x5e45_0a1e_3b0d_0768;

/// The transform's fixed parts: a sign per input point and the output coordinates kept.
struct Transform {
    signs: Vec<f64>,
    kept: Vec<usize>,
}

fn transform() -> &'static Transform {
    static TRANSFORM: OnceLock<Transform> = OnceLock::new();
    TRANSFORM.get_or_init(|| {
        let mut rng = ChaCha8Rng::seed_from_u64(PROJECTION_SEED);
        let signs = (0..WINDOW_POINTS).map(|_| if rng.random::<bool>() { 1.0 } else { -1.0 }).collect();
        let mut order: Vec<usize> = (0..WINDOW_POINTS).collect();
        order.shuffle(&mut rng);
        order.truncate(EMBEDDING_DIM);
        Transform { signs, kept: order }
    })
}

/// In-place Walsh-Hadamard transform of a power-of-two length, scaled to be orthonormal.
fn hadamard(v: &mut [f64]) {
    let n = v.len();
    let mut h = 1;
    while h < n {
        for start in (0..n).step_by(2 * h) {
            for i in start..start + h {
                let (a, b) = (v[i], v[i + h]);
                v[i] = a + b;
                v[i + h] = a - b;
            }
        }
        h *= 2;
    }
    let scale = 1.0 / (n as f64).sqrt();
    v.iter_mut().for_each(|x| *x *= scale);
}

/// Fits a window to 1024 points: zero-padded at the end, or its last 1024 points kept.
pub(crate) fn fit_window(values: &[f64]) -> (Vec<f64>, Option<String>) {
    let n = values.len();
    if n == WINDOW_POINTS {
        (values.to_vec(), None)
    } else if n < WINDOW_POINTS {
        let mut w = values.to_vec();
        w.resize(WINDOW_POINTS, 0.0);
        (w, Some(format!("window of {n} points was zero-padded to {WINDOW_POINTS}")))
    } else {
        (
            values[n - WINDOW_POINTS..].to_vec(),
            Some(format!("window of {n} points was truncated to its last {WINDOW_POINTS}")),
        )
    }
}

/// z-scores a whole event with one mean and deviation over all its channels, which keeps the
/// channels comparable with each other. A constant event becomes zeros.
pub(crate) fn zscore_event(channels: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let count = channels.iter().map(Vec::len).sum::<usize>().max(1) as f64;
    let mean = channels.iter().flatten().sum::<f64>() / count;
    let var = channels.iter().flatten().map(|v| (v - mean).powi(2)).sum::<f64>() / count;
    let std = var.sqrt();
    channels
        .iter()
        .map(|c| {
            c.iter()
                .map(|v| if std > 0.0 && std.is_finite() { (v - mean) / std } else { 0.0 })
                .collect()
        })
        .collect()
}

pub(crate) fn embed_window(window: &[f64]) -> Vec<f32> {
    let t = transform();
    let mut v: Vec<f64> = window.iter().zip(&t.signs).map(|(x, s)| x * s).collect();
    v.resize(WINDOW_POINTS, 0.0);
    hadamard(&mut v);
    // Rescaled so the kept coordinates carry the whole norm on average.
    let rescale = (WINDOW_POINTS as f64 / EMBEDDING_DIM as f64).sqrt();
    // Held to finite float32: a window of huge values (1e100 is valid JSON) would otherwise
    // overflow to infinity (or to NaN, inf - inf, in the transform), which JSON writes as null.
    let finite = |x: f64| if x.is_nan() { 0.0 } else { x.clamp(-f64::from(f32::MAX), f64::from(f32::MAX)) as f32 };
    t.kept.iter().map(|&i| finite(v[i] * rescale)).collect()
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Encoded {
    /// One embedding per channel, channels of all events in order.
    pub embeddings: Vec<Vec<f32>>,
    pub warnings: Vec<String>,
}

pub(crate) fn encode(events: &[Vec<Vec<f64>>], normalize: bool) -> Encoded {
    let mut embeddings = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    for event in events {
        let normalized;
        let channels = if normalize {
            normalized = zscore_event(event);
            &normalized
        } else {
            event
        };
        for channel in channels {
            let (window, warning) = fit_window(channel);
            if let Some(w) = warning {
                if !warnings.contains(&w) {
                    warnings.push(w);
                }
            }
            embeddings.push(embed_window(&window));
        }
    }
    Encoded { embeddings, warnings }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f64 {
        let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
        let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        dot / (na * nb)
    }

    fn sine(n: usize, freq: f64, phase: f64) -> Vec<f64> {
        (0..n).map(|i| (i as f64 * freq + phase).sin()).collect()
    }

    #[test]
    fn the_transform_keeps_lengths_close() {
        let w = sine(WINDOW_POINTS, 3.0, 0.2);
        let norm_in = w.iter().map(|x| x * x).sum::<f64>().sqrt();
        let e = embed_window(&w);
        let norm_out = e.iter().map(|x| (*x as f64) * (*x as f64)).sum::<f64>().sqrt();
        assert!((norm_out / norm_in - 1.0).abs() < 0.2, "{norm_in} -> {norm_out}");
    }

    #[test]
    fn huge_finite_values_still_embed_as_finite_numbers() {
        let mut w = vec![1e100, -1e100, 0.0, 1.0];
        w.extend(std::iter::repeat_n(f64::MAX, 600));
        assert!(embed_window(&w).iter().all(|x| x.is_finite()));
    }

    #[test]
    fn deterministic() {
        let w = sine(1024, 0.05, 0.0);
        assert_eq!(embed_window(&w), embed_window(&w));
        assert_eq!(embed_window(&w).len(), EMBEDDING_DIM);
    }

    #[test]
    fn similar_windows_are_closer_than_unrelated_ones() {
        let base = sine(1024, 0.05, 0.0);
        // Deterministic small "noise" so the test does not depend on a random generator.
        let noisy: Vec<f64> = base.iter().enumerate().map(|(i, v)| v + 0.05 * ((i * 7919 % 101) as f64 / 101.0 - 0.5)).collect();
        let other = sine(1024, 0.31, 1.3);
        let (a, b, c) = (embed_window(&base), embed_window(&noisy), embed_window(&other));
        assert!(cosine(&a, &b) > 0.95);
        assert!(cosine(&a, &b) > cosine(&a, &c));
    }

    #[test]
    fn padding_and_truncation_warn() {
        let (w, warn) = fit_window(&[1.0, 2.0]);
        assert_eq!(w.len(), 1024);
        assert_eq!(&w[..3], &[1.0, 2.0, 0.0]);
        assert_eq!(warn.as_deref(), Some("window of 2 points was zero-padded to 1024"));
        let long: Vec<f64> = (0..1500).map(|i| i as f64).collect();
        let (w, warn) = fit_window(&long);
        assert_eq!(w[0], 476.0);
        assert_eq!(warn.as_deref(), Some("window of 1500 points was truncated to its last 1024"));
        assert_eq!(fit_window(&vec![0.0; 1024]).1, None);
    }

    #[test]
    fn normalize_uses_one_mean_and_std_for_the_event() {
        let z = zscore_event(&[vec![1.0, 3.0], vec![5.0, 7.0]]);
        // mean 4, population std sqrt(5)
        let s = 5f64.sqrt();
        assert!((z[0][0] + 3.0 / s).abs() < 1e-12);
        assert!((z[1][1] - 3.0 / s).abs() < 1e-12);
        assert_eq!(zscore_event(&[vec![2.0, 2.0]]), vec![vec![0.0, 0.0]]);
        // normalize erases amplitude: a scaled copy encodes the same
        let a = encode(&[vec![sine(1024, 0.1, 0.0)]], true);
        let b = encode(&[vec![sine(1024, 0.1, 0.0).iter().map(|v| v * 10.0 + 3.0).collect()]], true);
        assert!(cosine(&a.embeddings[0], &b.embeddings[0]) > 0.9999);
    }

    #[test]
    fn channels_in_order_and_warnings_deduplicated() {
        let out = encode(&[vec![vec![1.0; 10], vec![2.0; 10]], vec![vec![3.0; 10]]], false);
        assert_eq!(out.embeddings.len(), 3);
        assert_eq!(out.warnings, vec!["window of 10 points was zero-padded to 1024".to_string()]);
    }
}
