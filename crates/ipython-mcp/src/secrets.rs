//! Keeping the server's secrets out of its kernels' reach (docs/src/http.md, "Security model").
//!
//! Kernels run as the server's user, so removing a token from the environment kernels inherit
//! is not enough: `/proc/<server pid>/environ` and `/proc/<server pid>/cmdline` show the
//! server's *initial* environment and arguments, read from its own memory, whatever
//! `remove_var` did since. So, once the settings are read and before anything else runs:
//! 1. the secrets' bytes in that memory are overwritten (environment values of the token
//!    variables, and any argument holding a token's value: `--http-token`),
//! 2. the variables are removed from the environment kernels inherit,
//! 3. the process is made non-dumpable (`PR_SET_DUMPABLE` 0), so a process of the same user
//!    that is not root can neither read its `/proc` entries nor attach to it and read its
//!    memory. Kernels are unaffected: `execve` makes each dumpable again.
//!
//! Root (or `CAP_SYS_PTRACE`) still reads any memory: against kernel code running as root,
//! only an OS sandbox helps.

use ipython_mcp_config::{Config, JupyterToken, TokenSource};

/// The variables whose values are secrets, or say where secrets are.
const VARIABLES: [ipython_mcp_config::Setting; 3] = [
    ipython_mcp_config::HTTP_TOKEN,
    ipython_mcp_config::HTTP_PRINCIPALS_FILE,
    ipython_mcp_config::JUPYTER_TOKEN,
];

/// Hides what `config` was given from this process's environment, arguments and `/proc`
/// entries. Call it single-threaded, after the settings were read and before anything
/// reads the environment or arguments again.
pub fn conceal(config: &Config) {
    let mut values: Vec<&str> = Vec::new();
    if let TokenSource::Given(token) = &config.http.token {
        values.push(token.expose());
    }
    if let Some(jupyter) = &config.jupyter {
        if let JupyterToken::Given(token) = &jupyter.token {
            values.push(token.expose());
        }
    }
    overwrite_initial_memory(&values);
    for setting in VARIABLES {
        std::env::remove_var(setting.env);
    }
    // Anything served over HTTP holds a token (given, generated, a file's); a Jupyter server's
    // token is one too. Over stdio without one there is nothing to hide, and the process stays
    // dumpable (core dumps, a debugger of the same user).
    let holds_secret = config.transport == ipython_mcp_config::Transport::Http
        || config
            .jupyter
            .as_ref()
            .is_some_and(|jupyter| !matches!(jupyter.token, JupyterToken::None));
    if holds_secret {
        non_dumpable();
    }
}

#[cfg(target_os = "linux")]
fn non_dumpable() {
    // SAFETY: prctl(2) with plain integer arguments changes only this process's flag.
    let set = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if set != 0 {
        tracing::debug!("PR_SET_DUMPABLE failed: /proc entries stay readable to this user");
    }
}

#[cfg(not(target_os = "linux"))]
fn non_dumpable() {}

/// Overwrites, in the memory `/proc/self/environ` and `/proc/self/cmdline` are read from,
/// the values of [`VARIABLES`] and every argument byte run equal to one of `values`.
#[cfg(target_os = "linux")]
fn overwrite_initial_memory(values: &[&str]) {
    let Some([arguments, environment]) = initial_regions() else {
        return;
    };
    // SAFETY: the kernel reports these ranges as this process's initial arguments and
    // environment (the top of the main thread's stack, mapped and writable for the process's
    // life). Nothing else runs yet, and nothing holds a Rust reference into them: the
    // environment and arguments were copied into owned strings when the settings were read.
    let arguments = unsafe { region(arguments) };
    for value in values.iter().filter(|value| !value.is_empty()) {
        mask_occurrences(arguments, value.as_bytes());
    }
    // SAFETY: as above.
    let environment = unsafe { region(environment) };
    for entry in environment.split_mut(|byte| *byte == 0) {
        for setting in VARIABLES {
            let name = setting.env.as_bytes();
            if entry.len() > name.len() && entry.starts_with(name) && entry[name.len()] == b'=' {
                entry[name.len() + 1..].fill(b'*');
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn overwrite_initial_memory(_values: &[&str]) {}

/// `arg_start..arg_end` and `env_start..env_end` of this process (proc(5), fields 48 to 51
/// of `/proc/self/stat`).
#[cfg(target_os = "linux")]
fn initial_regions() -> Option<[(usize, usize); 2]> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it,
    // where field 3 is the first.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let field = |number: usize| fields.get(number - 3)?.parse::<usize>().ok();
    let arguments = (field(48)?, field(49)?);
    let environment = (field(50)?, field(51)?);
    [arguments, environment]
        .iter()
        .all(|(start, end)| *start != 0 && start <= end)
        .then_some([arguments, environment])
}

/// # Safety
/// `start..end` must be memory of this process, mapped and writable, that nothing else
/// references while the slice lives.
#[cfg(target_os = "linux")]
unsafe fn region<'a>((start, end): (usize, usize)) -> &'a mut [u8] {
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end - start) }
}

/// Replaces every occurrence of `needle` in `haystack` with `*`s.
fn mask_occurrences(haystack: &mut [u8], needle: &[u8]) {
    if needle.is_empty() || needle.len() > haystack.len() {
        return;
    }
    let mut at = 0;
    while at + needle.len() <= haystack.len() {
        if &haystack[at..at + needle.len()] == needle {
            haystack[at..at + needle.len()].fill(b'*');
            at += needle.len();
        } else {
            at += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_occurrence_is_masked_and_nothing_else() {
        let mut bytes = b"ipython-mcp\0--http-token\0s3cret-s3cret\0--x=s3cret-s3cret\0".to_vec();
        mask_occurrences(&mut bytes, b"s3cret-s3cret");
        assert_eq!(
            bytes,
            b"ipython-mcp\0--http-token\0*************\0--x=*************\0".to_vec()
        );
        let mut short = b"ab".to_vec();
        mask_occurrences(&mut short, b"abc");
        assert_eq!(short, b"ab".to_vec());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_initial_regions_are_this_process_s_arguments_and_environment() {
        let [(arg_start, arg_end), (env_start, env_end)] =
            initial_regions().expect("regions of this process");
        assert!(arg_start < arg_end && arg_end <= env_start && env_start < env_end);
        // What /proc/self/cmdline shows is exactly the argument region.
        let cmdline = std::fs::read("/proc/self/cmdline").expect("cmdline");
        assert_eq!(cmdline.len(), arg_end - arg_start);
    }
}
