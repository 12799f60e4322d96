//! The seccomp filter of every sandboxed command. No UNIX socket is ever made
//! (`socketpair` stays: it reaches nothing): a path names a socket outside the
//! sandbox — the user's ssh agent, Docker's — and Landlock below ABI 9 cannot refuse a
//! connect to one, while `/proc/<pid>/net/unix` lists them all. Nor a vsock (on WSL2 it
//! reaches Windows). Without network, in a network namespace of its own a command may
//! still make IP and netlink sockets (they see only that namespace's loopback); with
//! none (the fallback) no other socket either. io_uring is refused (its socket and
//! connect operations would pass the filter by). Calls of another architecture (x32
//! on x86-64 included) are refused before anything else.

/// `struct sock_filter`: one classic BPF instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct Instruction {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;

/// Offsets into `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// The low 32 bits of the first argument (little-endian).
const ARG0: u32 = 16;

#[cfg(target_arch = "x86_64")]
const NATIVE: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const NATIVE: u32 = 0xc000_00b7;
/// x32 system calls carry this bit in their number on x86-64.
const X32_BIT: u32 = 0x4000_0000;

fn op(code: u16, k: u32) -> Instruction {
    Instruction { code, jt: 0, jf: 0, k }
}

fn jump_if(value: u32, jt: u8, jf: u8) -> Instruction {
    Instruction { code: JEQ_K, jt, jf, k: value }
}

fn nr(call: libc::c_long) -> u32 {
    call as u32
}

/// The filter for a command with `network` or without it; `own_network`: it runs in
/// a network namespace of its own (then IP and netlink sockets stay inside it).
pub(crate) fn filter(network: bool, own_network: bool) -> Vec<Instruction> {
    let denied = RET_ERRNO | libc::EACCES as u32;
    let mut p = vec![op(LD_W_ABS, ARCH), jump_if(NATIVE, 1, 0), op(RET_K, RET_KILL_PROCESS), op(LD_W_ABS, NR)];
    if cfg!(target_arch = "x86_64") {
        p.extend([Instruction { code: JGE_K, jt: 0, jf: 1, k: X32_BIT }, op(RET_K, denied)]);
    }
    for call in [libc::SYS_io_uring_setup, libc::SYS_io_uring_enter, libc::SYS_io_uring_register] {
        p.extend([jump_if(nr(call), 0, 1), op(RET_K, denied)]);
    }
    // Anything but `socket` is allowed; `socket` is looked at by its family.
    p.extend([jump_if(nr(libc::SYS_socket), 1, 0), op(RET_K, RET_ALLOW), op(LD_W_ABS, ARG0)]);
    for family in [libc::AF_UNIX, libc::AF_VSOCK] {
        p.extend([jump_if(family as u32, 0, 1), op(RET_K, denied)]);
    }
    if network {
        p.push(op(RET_K, RET_ALLOW));
        return p;
    }
    if own_network {
        for family in [libc::AF_INET, libc::AF_INET6, libc::AF_NETLINK] {
            p.extend([jump_if(family as u32, 0, 1), op(RET_K, RET_ALLOW)]);
        }
    }
    p.push(op(RET_K, denied));
    p
}

/// Installs `program` on the calling thread (after `PR_SET_NO_NEW_PRIVS`); for the
/// sandbox helper, just before it execs the command.
#[expect(unsafe_code, reason = "seccomp(2) reads the program through a pointer valid for the call")]
pub(crate) fn install(program: &[Instruction]) -> std::io::Result<()> {
    #[repr(C)]
    struct Fprog {
        len: u16,
        filter: *const Instruction,
    }
    let prog = Fprog { len: program.len() as u16, filter: program.as_ptr() };
    const SET_MODE_FILTER: libc::c_uint = 1;
    // SAFETY: `prog` and the instructions it points at outlive the call, which copies them.
    let rc = unsafe { libc::syscall(libc::SYS_seccomp, SET_MODE_FILTER, 0 as libc::c_uint, &prog as *const Fprog) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `program` over one system call as the kernel would (the subset of
    /// classic BPF the filter uses).
    fn verdict(program: &[Instruction], arch: u32, call: u32, arg0: u32) -> u32 {
        let mut acc = 0u32;
        let mut pc = 0usize;
        loop {
            let i = program[pc];
            pc += 1;
            match i.code {
                LD_W_ABS => {
                    acc = match i.k {
                        NR => call,
                        ARCH => arch,
                        ARG0 => arg0,
                        other => panic!("load of offset {other}"),
                    }
                }
                JEQ_K => pc += usize::from(if acc == i.k { i.jt } else { i.jf }),
                JGE_K => pc += usize::from(if acc >= i.k { i.jt } else { i.jf }),
                RET_K => return i.k,
                other => panic!("opcode {other:#x}"),
            }
        }
    }

    #[test]
    fn sockets_that_could_leave_are_refused_and_everything_else_passes() {
        let denied = RET_ERRNO | libc::EACCES as u32;
        let socket = nr(libc::SYS_socket);
        for (network, own_network) in [(true, true), (true, false), (false, true), (false, false)] {
            let p = filter(network, own_network);
            let v = |call: u32, arg0: u32| verdict(&p, NATIVE, call, arg0);
            assert_eq!(v(socket, libc::AF_UNIX as u32), denied);
            assert_eq!(v(socket, libc::AF_VSOCK as u32), denied);
            let ip = if network || own_network { RET_ALLOW } else { denied };
            assert_eq!(v(socket, libc::AF_INET as u32), ip);
            assert_eq!(v(socket, libc::AF_INET6 as u32), ip);
            assert_eq!(v(socket, libc::AF_PACKET as u32), if network { RET_ALLOW } else { denied });
            assert_eq!(v(nr(libc::SYS_socketpair), libc::AF_UNIX as u32), RET_ALLOW);
            assert_eq!(v(nr(libc::SYS_connect), 3), RET_ALLOW);
            assert_eq!(v(nr(libc::SYS_read), 0), RET_ALLOW);
            assert_eq!(v(nr(libc::SYS_io_uring_setup), 0), denied);
            assert_eq!(verdict(&p, 0x4000_0003, socket, 0), RET_KILL_PROCESS, "another architecture");
            if cfg!(target_arch = "x86_64") {
                assert_eq!(v(socket | X32_BIT, libc::AF_INET as u32), denied, "x32");
            }
        }
    }
}
