//! Output benchmarks: fitting an oversized image, and memory retained after many image-heavy executions.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use rmcp::model::CallToolRequestParams;
use serde_json::json;

use crate::percentile::percentile;
use crate::server::{proc_status_kib, serve, Served};

pub(crate) const IMAGE_FIT_RUNS: usize = 5;

/// Fitting one large PNG into the default image bound, as the server does it.
pub(crate) struct ImageFit {
    pub(crate) original_bytes: usize,
    pub(crate) original_size: (u32, u32),
    pub(crate) fitted_bytes: usize,
    pub(crate) fitted_size: (u32, u32),
    pub(crate) fitted_mime: &'static str,
    pub(crate) seconds: Vec<f64>,
}

pub(crate) fn print_image_fit(fit: &ImageFit) {
    println!();
    println!(
        "fitting a {:.1} MB PNG ({}x{}, noise) into {} bytes: median {:.0} ms over {IMAGE_FIT_RUNS} runs (min {:.0}, max {:.0}) -> {} {}x{}, {} bytes",
        fit.original_bytes as f64 / 1e6,
        fit.original_size.0,
        fit.original_size.1,
        ipython_mcp_config::OutputLimits::default().max_image_bytes,
        percentile(&fit.seconds, 0.5) * 1000.0,
        percentile(&fit.seconds, 0.0) * 1000.0,
        percentile(&fit.seconds, 1.0) * 1000.0,
        fit.fitted_mime,
        fit.fitted_size.0,
        fit.fitted_size.1,
        fit.fitted_bytes,
    );
}

/// A 4 MB PNG of random pixels (the worst case: nothing compresses), fitted into the default
/// `MAX_IMAGE_BYTES` by the server's own code, on a blocking thread as the server runs it.
pub(crate) async fn bench_image_fit() -> anyhow::Result<ImageFit> {
    tokio::task::spawn_blocking(|| {
        let side = 1160;
        let mut seed: u32 = 0x9e37_79b9;
        let pixels = image::RgbImage::from_fn(side, side, |_, _| {
            let mut channel = || {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                (seed >> 24) as u8
            };
            image::Rgb([channel(), channel(), channel()])
        });
        let mut raw = std::io::Cursor::new(Vec::new());
        image::DynamicImage::ImageRgb8(pixels).write_to(&mut raw, image::ImageFormat::Png)?;
        let raw = raw.into_inner();
        let max_bytes = ipython_mcp_config::OutputLimits::default().max_image_bytes;
        let mut seconds = Vec::new();
        let mut fitted = None;
        for _ in 0..IMAGE_FIT_RUNS {
            let started = Instant::now();
            let result = ipython_mcp_output::raster::fit(&raw, "image/png", max_bytes, true)?;
            seconds.push(started.elapsed().as_secs_f64());
            fitted = Some(result);
        }
        let fitted = fitted.context("no run")?;
        Ok(ImageFit {
            original_bytes: raw.len(),
            original_size: (side, side),
            fitted_bytes: fitted.bytes.len(),
            fitted_size: fitted.size,
            fitted_mime: fitted.mime,
            seconds,
        })
    })
    .await?
}

pub(crate) fn print_retained(retained: &Retained) {
    println!();
    println!(
        "server RSS after {RETAINED_EXECUTIONS} executions x {RETAINED_IMAGES} one-MiB images: {:>6.1} MiB (idle before {:.1} MiB, peak {:.1} MiB, target <= 128); {:.2} s per execution",
        retained.after_kib as f64 / 1024.0,
        retained.idle_kib as f64 / 1024.0,
        retained.peak_kib as f64 / 1024.0,
        retained.seconds_per_execution,
    );
}

pub(crate) const RETAINED_EXECUTIONS: usize = 32;
pub(crate) const RETAINED_IMAGES: usize = 20;

/// Server memory around executions whose displays are big images.
pub(crate) struct Retained {
    pub(crate) idle_kib: u64,
    pub(crate) after_kib: u64,
    pub(crate) peak_kib: u64,
    pub(crate) seconds_per_execution: f64,
}

/// Runs 32 executions that each display 20 one-MiB images (just within `MAX_IMAGE_BYTES`, so
/// every one is kept), then reads the server's RSS: all 32 stay retained for get_output.
pub(crate) async fn bench_retained(server_binary: &Path) -> anyhow::Result<Retained> {
    let Served {
        mut child,
        pid,
        client,
    } = serve(
        server_binary,
        &[
            (ipython_mcp_config::LOG.env, "warn".to_owned()),
            (ipython_mcp_config::SPARE_KERNELS.env, "0".to_owned()),
        ],
    )
    .await?;
    let call = |code: String| {
        let arguments = json!({"code": code, "timeout_seconds": 300})
            .as_object()
            .cloned()
            .expect("object");
        client
            .peer()
            .call_tool(CallToolRequestParams::new("execute").with_arguments(arguments))
    };
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let result =
            call("import base64, os\nfrom IPython.display import display".to_owned()).await?;
        if result.is_error != Some(true) {
            break;
        }
        if Instant::now() > deadline {
            bail!("kernel never became ready: {:?}", result.structured_content);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let idle_kib = proc_status_kib(pid, "VmRSS:");
    let code = format!(
        "for _ in range({RETAINED_IMAGES}):\n    display({{'image/png': base64.b64encode(os.urandom((1 << 20) - 2)).decode(), 'text/plain': '<image>'}}, raw=True)"
    );
    // In the background: one such result (28 MB of base64) is more than rmcp's stdio
    // transport reads in one line (16 MiB), and retention is what is measured here.
    let started = Instant::now();
    for _ in 0..RETAINED_EXECUTIONS {
        let arguments = json!({"code": code, "background": true, "timeout_seconds": 300})
            .as_object()
            .cloned()
            .expect("object");
        let result = client
            .peer()
            .call_tool(CallToolRequestParams::new("execute").with_arguments(arguments))
            .await?;
        if result.is_error == Some(true) {
            bail!("execute was refused: {:?}", result.structured_content);
        }
    }
    loop {
        let status = client
            .peer()
            .call_tool(CallToolRequestParams::new("runtime_status"))
            .await?
            .structured_content
            .unwrap_or_default();
        if status["queue_depth"] == 0 && status["operation_active"] == false {
            break;
        }
        if started.elapsed() > Duration::from_secs(1800) {
            bail!("the executions never finished: {status}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let seconds_per_execution = started.elapsed().as_secs_f64() / RETAINED_EXECUTIONS as f64;
    let after_kib = proc_status_kib(pid, "VmRSS:");
    let peak_kib = proc_status_kib(pid, "VmHWM:");
    // Every execution is still remembered (for get_output).
    let kernels = client
        .peer()
        .call_tool(CallToolRequestParams::new("kernel_list"))
        .await?
        .structured_content
        .unwrap_or_default();
    let remembered = kernels["kernels"][0]["executions"]
        .as_array()
        .map_or(0, Vec::len);
    if remembered < RETAINED_EXECUTIONS {
        bail!("only {remembered} executions are remembered: {kernels}");
    }
    client.cancel().await?;
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    Ok(Retained {
        idle_kib,
        after_kib,
        peak_kib,
        seconds_per_execution,
    })
}
