//! Fits an oversized PNG or JPEG image into the image bound: decode, resize keeping the aspect
//! ratio, re-encode, until it fits. Pure and synchronous (CPU work: callers run it on a blocking
//! thread); the `image` crate with only its PNG and JPEG codecs does the pixels.

use std::io::Cursor;

use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType as PngFilter, PngEncoder};
use image::imageops::FilterType;
use image::{DynamicImage, ImageFormat, ImageReader, Limits};

pub const PNG: &str = "image/png";
pub const JPEG: &str = "image/jpeg";

/// Largest image decoded, in pixels per side and in decoder memory: a small file that claims to
/// be a 100 000 × 100 000 picture (a decompression bomb) is refused, not allocated.
const MAX_SIDE: u32 = 16_384;
const MAX_DECODE_ALLOC: u64 = 512 * 1024 * 1024;

/// JPEG quality of re-encoded images: photographs stay faithful at a fraction of the bytes.
const JPEG_QUALITY: u8 = 85;

/// A PNG that is opaque becomes a JPEG only when that keeps at least this many times its width:
/// plots, screenshots and noise stay PNGs (a JPEG gains them less: about 2× for pure noise),
/// photographs, where a JPEG gains about 3×, stay large enough to be read.
const JPEG_GAIN: f64 = 2.5;

/// Resize attempts before giving up (each one aims closer, so a handful is plenty).
const MAX_ATTEMPTS: usize = 12;

/// An image made to fit.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    /// The encoded image.
    pub bytes: Vec<u8>,
    /// Its format: [`PNG`] or [`JPEG`].
    pub mime: &'static str,
    pub original_size: (u32, u32),
    pub size: (u32, u32),
}

/// Why an image could not be fitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FitError {
    #[error("not a decodable {mime} image: {reason}")]
    Undecodable { mime: String, reason: String },
    #[error("no size of it fits in {max_bytes} bytes")]
    NoFit { max_bytes: usize },
}

/// Shrinks `raw` (a `mime` image, PNG or JPEG) until its encoding fits `max_bytes`, keeping the
/// aspect ratio. A PNG stays a PNG (alpha kept) unless it is opaque and a JPEG keeps
/// [`JPEG_GAIN`] times its width; a JPEG stays a JPEG. `jpeg_allowed` is false when the bundle
/// already carries a JPEG, so the PNG is never turned into a second one.
pub fn fit(
    raw: &[u8],
    mime: &str,
    max_bytes: usize,
    jpeg_allowed: bool,
) -> Result<Fitted, FitError> {
    let format = match mime {
        PNG => ImageFormat::Png,
        JPEG => ImageFormat::Jpeg,
        other => {
            return Err(FitError::Undecodable {
                mime: other.to_owned(),
                reason: "only PNG and JPEG are resized".to_owned(),
            })
        }
    };
    let undecodable = |reason: String| FitError::Undecodable {
        mime: mime.to_owned(),
        reason,
    };
    let mut reader = ImageReader::new(Cursor::new(raw));
    reader.set_format(format);
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_DECODE_ALLOC);
    reader.limits(limits);
    let image = reader
        .decode()
        .map_err(|error| undecodable(error.to_string()))?;
    let original_size = (image.width(), image.height());
    // A first guess from the bytes; each attempt then aims from what the last one weighed.
    let first_scale = (max_bytes as f64 / raw.len().max(1) as f64).sqrt().min(1.0);
    if format == ImageFormat::Jpeg {
        let image = DynamicImage::ImageRgb8(image.to_rgb8());
        return shrink(&image, max_bytes, first_scale, JPEG);
    }
    let png = shrink(&image, max_bytes, first_scale, PNG)?;
    if !jpeg_allowed || !is_opaque(&image) {
        return Ok(png);
    }
    let png_scale = f64::from(png.size.0) / f64::from(original_size.0.max(1));
    let jpeg_scale = (png_scale * JPEG_GAIN).min(1.0);
    if jpeg_scale <= png_scale {
        return Ok(png); // already at full size
    }
    let opaque = DynamicImage::ImageRgb8(image.to_rgb8());
    match encode_at(&opaque, jpeg_scale, JPEG) {
        Ok((bytes, size)) if bytes.len() <= max_bytes => Ok(Fitted {
            bytes,
            mime: JPEG,
            original_size,
            size,
        }),
        _ => Ok(png),
    }
}

/// Encodes `image` at shrinking scales until it fits.
fn shrink(
    image: &DynamicImage,
    max_bytes: usize,
    first_scale: f64,
    mime: &'static str,
) -> Result<Fitted, FitError> {
    let original_size = (image.width(), image.height());
    let mut scale = first_scale;
    for _ in 0..MAX_ATTEMPTS {
        let (bytes, size) =
            encode_at(image, scale, mime).map_err(|_| FitError::NoFit { max_bytes })?;
        if bytes.len() <= max_bytes {
            return Ok(Fitted {
                bytes,
                mime,
                original_size,
                size,
            });
        }
        if size == (1, 1) {
            break;
        }
        // Encoded bytes grow about with the pixel count: aim a little under the bound, and
        // always shrink by at least a tenth so the loop ends.
        let aimed = scale * (max_bytes as f64 / bytes.len() as f64).sqrt() * 0.95;
        scale = aimed.min(scale * 0.9);
    }
    Err(FitError::NoFit { max_bytes })
}

/// The image resized by `scale` (aspect ratio kept, at least 1 × 1) and encoded as `mime`.
fn encode_at(
    image: &DynamicImage,
    scale: f64,
    mime: &str,
) -> Result<(Vec<u8>, (u32, u32)), image::ImageError> {
    let side = |length: u32| ((f64::from(length) * scale).round() as u32).clamp(1, length.max(1));
    let size = (side(image.width()), side(image.height()));
    let resized = if size == (image.width(), image.height()) {
        image.clone()
    } else {
        // Triangle (bilinear) filtering: near Lanczos for downscaling, several times faster.
        image.resize_exact(size.0, size.1, FilterType::Triangle)
    };
    let mut bytes = Vec::new();
    if mime == JPEG {
        resized.write_with_encoder(JpegEncoder::new_with_quality(&mut bytes, JPEG_QUALITY))?;
    } else {
        resized.write_with_encoder(PngEncoder::new_with_quality(
            &mut bytes,
            CompressionType::Default,
            PngFilter::Adaptive,
        ))?;
    }
    Ok((bytes, size))
}

/// True when no pixel is even partly transparent (a JPEG would lose nothing but detail).
fn is_opaque(image: &DynamicImage) -> bool {
    if !image.color().has_alpha() {
        return true;
    }
    match image {
        DynamicImage::ImageLumaA8(pixels) => pixels.pixels().all(|pixel| pixel.0[1] == u8::MAX),
        DynamicImage::ImageRgba8(pixels) => pixels.pixels().all(|pixel| pixel.0[3] == u8::MAX),
        DynamicImage::ImageLumaA16(pixels) => pixels.pixels().all(|pixel| pixel.0[1] == u16::MAX),
        DynamicImage::ImageRgba16(pixels) => pixels.pixels().all(|pixel| pixel.0[3] == u16::MAX),
        other => other.to_rgba8().pixels().all(|pixel| pixel.0[3] == u8::MAX),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use image::{Rgb, RgbImage, Rgba, RgbaImage};

    /// A deterministic pseudo-random byte stream (xorshift), so test images are reproducible.
    fn noise(seed: &mut u32) -> u8 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 17;
        *seed ^= *seed << 5;
        (*seed >> 24) as u8
    }

    fn encode(image: DynamicImage, format: ImageFormat) -> Vec<u8> {
        let mut bytes = Cursor::new(Vec::new());
        image.write_to(&mut bytes, format).expect("encode");
        bytes.into_inner()
    }

    /// Pure noise: incompressible as PNG and as JPEG alike.
    pub(crate) fn noisy_png(width: u32, height: u32) -> Vec<u8> {
        let mut seed = 0x9e37_79b9;
        let image = RgbImage::from_fn(width, height, |_, _| {
            Rgb([noise(&mut seed), noise(&mut seed), noise(&mut seed)])
        });
        encode(DynamicImage::ImageRgb8(image), ImageFormat::Png)
    }

    /// A smooth gradient with fine grain, like a photograph: PNG cannot compress the grain,
    /// JPEG quantizes it away.
    fn photo_like(width: u32, height: u32) -> DynamicImage {
        let mut seed = 0x1234_5678;
        let image = RgbImage::from_fn(width, height, |x, y| {
            let grain = i32::from(noise(&mut seed) % 16) - 8;
            let channel = |base: u32| (base as i32 + grain).clamp(0, 255) as u8;
            Rgb([
                channel(x * 255 / width),
                channel(y * 255 / height),
                channel((x + y) * 127 / (width + height)),
            ])
        });
        DynamicImage::ImageRgb8(image)
    }

    fn decoded(fitted: &Fitted) -> DynamicImage {
        image::load_from_memory(&fitted.bytes).expect("the fitted image decodes")
    }

    #[test]
    fn a_png_is_shrunk_to_fit_keeping_its_aspect_ratio() {
        let raw = noisy_png(600, 200);
        let fitted = fit(&raw, PNG, raw.len() / 5, true).expect("fits");
        assert!(fitted.bytes.len() <= raw.len() / 5);
        assert_eq!(fitted.mime, PNG, "noise gains nothing as JPEG");
        assert_eq!(fitted.original_size, (600, 200));
        let (width, height) = fitted.size;
        assert!(width < 600);
        assert!(
            (f64::from(width) / f64::from(height) - 3.0).abs() < 0.05,
            "{width}x{height}"
        );
        assert_eq!(
            (decoded(&fitted).width(), decoded(&fitted).height()),
            fitted.size
        );
    }

    #[test]
    fn a_transparent_png_stays_a_png_with_its_alpha() {
        let mut seed = 7;
        let image = RgbaImage::from_fn(400, 400, |x, _| {
            let grain = noise(&mut seed);
            Rgba([grain, grain / 2, 255 - grain, if x < 200 { 0 } else { 255 }])
        });
        let raw = encode(DynamicImage::ImageRgba8(image), ImageFormat::Png);
        let fitted = fit(&raw, PNG, raw.len() / 4, true).expect("fits");
        assert_eq!(fitted.mime, PNG);
        let pixels = decoded(&fitted).to_rgba8();
        assert!(decoded(&fitted).color().has_alpha());
        assert_eq!(pixels.get_pixel(0, 0).0[3], 0, "the transparent half stays");
        let right = pixels.width() - 1;
        assert_eq!(pixels.get_pixel(right, 0).0[3], 255);
    }

    #[test]
    fn an_opaque_photo_like_png_becomes_a_larger_jpeg() {
        let raw = encode(photo_like(800, 600), ImageFormat::Png);
        let max = raw.len() / 8;
        let fitted = fit(&raw, PNG, max, true).expect("fits");
        assert_eq!(fitted.mime, JPEG, "{:?}", fitted.size);
        assert!(fitted.bytes.len() <= max);
        assert_eq!(decoded(&fitted).width(), fitted.size.0);
        let (width, height) = fitted.size;
        assert!(
            (f64::from(width) / f64::from(height) - 4.0 / 3.0).abs() < 0.02,
            "{width}x{height}"
        );
        // The same image may not turn into JPEG when the bundle already has one.
        let png = fit(&raw, PNG, max, false).expect("fits");
        assert_eq!(png.mime, PNG);
        assert!(
            png.size.0 * 2 <= width + 1,
            "{:?} vs {:?}",
            png.size,
            fitted.size
        );
    }

    #[test]
    fn a_jpeg_stays_a_jpeg() {
        let raw = encode(photo_like(1000, 500), ImageFormat::Jpeg);
        let fitted = fit(&raw, JPEG, raw.len() / 3, true).expect("fits");
        assert_eq!(fitted.mime, JPEG);
        assert!(fitted.bytes.len() <= raw.len() / 3);
        assert_eq!(fitted.original_size, (1000, 500));
        assert_eq!(fitted.size.0, fitted.size.1 * 2);
    }

    #[test]
    fn undecodable_input_is_an_error_not_a_panic() {
        for raw in [
            &b"not an image at all"[..],
            &b"\x89PNG\r\n\x1a\n"[..],
            &[0xff, 0xd8, 0xff, 0x00][..],
            &[][..],
        ] {
            for mime in [PNG, JPEG] {
                let error = fit(raw, mime, 1000, true).expect_err("undecodable");
                assert!(
                    matches!(error, FitError::Undecodable { .. }),
                    "{mime}: {error}"
                );
            }
        }
        // A truncated PNG too.
        let raw = noisy_png(100, 100);
        assert!(matches!(
            fit(&raw[..raw.len() / 2], PNG, 1000, true),
            Err(FitError::Undecodable { .. })
        ));
    }

    #[test]
    fn a_decompression_bomb_is_refused() {
        // Wider than any side we decode: refused from its header, before any allocation (the
        // same check stops a few-kilobyte file that claims 100 000 × 100 000 pixels).
        let image = image::GrayImage::new(MAX_SIDE + 1, 1);
        let raw = encode(DynamicImage::ImageLuma8(image), ImageFormat::Png);
        assert!(matches!(
            fit(&raw, PNG, 1000, true),
            Err(FitError::Undecodable { .. })
        ));
    }
}
