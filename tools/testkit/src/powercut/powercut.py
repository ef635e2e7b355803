#!/usr/bin/python3
"""powercut: a FUSE passthrough filesystem that models what a power cut loses.

    /usr/bin/python3 powercut.py --rule ext4|strict BACKING MOUNTPOINT [--store DIR] [--control SOCKET]

Every operation on MOUNTPOINT goes to BACKING, the live view (what the page cache holds). Beside
it we keep the durable view, what a disk would hold if the power went now:

- every inode has our own id (never reused; the backing's inode numbers are not trusted), and the
  durable content of a regular file is its shadow copy in the store (STORE/<id>), updated only by
  fsync/fdatasync: the ranges written since the last one are copied, the size is set; a file that
  was never fsynced is durably empty; a file present at mount time is durable as it is (its backing
  file is the durable content until something changes it: then it is first copied, holes skipped);
- every directory has a live table {name: id}, its durable table, and the pending changes between
  the two (kept as they happen: no tree walks). The rule says when they become durable:
    ext4    fsync/fdatasync of any file, or fsync of any directory, commits every pending change of
            the whole filesystem (a journal commit), besides the file's data;
    strict  (POSIX) fsync of a directory commits the pending changes of that directory only; fsync
            of a file makes its data and size durable and nothing else. A rename is durable on
            each side once that side's directory is fsynced (only the new side: two names).

Not modelled: chmod, chown and utime are durable at once; a journal's periodic commit (ext4's
5 s) never happens, only fsyncs commit; xattrs, fallocate and RENAME_EXCHANGE are refused
(ENOSYS, EOPNOTSUPP, EINVAL); fifos, sockets and devices work live but are not rebuilt.

Commands, one a line, on stdin (replies on stdout, one line each: "ok [json]" or "error <why>";
stdin's end unmounts and exits) and on the optional unix socket:
    cut                  freeze: the durable state stops changing; every operation fails with EIO
    reconstruct OUTDIR   write the durable tree into OUTDIR (new or empty): sparse files, modes,
                         owners, symlinks, hard links; fifos, sockets and devices are skipped
    stats                counters as JSON: fsyncs, bytes written/synced, what a cut dropped, ...
    quit                 unmount and exit (so do SIGTERM and SIGINT)
The line "ready" on stdout says the filesystem is mounted.
"""

import argparse
import bisect
import errno
import json
import os
import shutil
import signal
import stat
import sys
import traceback

import pyfuse3
import trio
from pyfuse3 import FUSEError

ROOT = pyfuse3.ROOT_INODE
CACHE_SECONDS = 1.0  # how long the kernel may cache names and attributes
OPEN_FLAGS_DROPPED = os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOCTTY | getattr(os, "O_DIRECT", 0)


def copy_range(src, dst, off, length):
    """Copy [off, off+length) from fd src to the same offsets of fd dst."""
    end = off + length
    while off < end:
        try:
            n = os.copy_file_range(src, dst, end - off, off, off)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            n = os.pwrite(dst, os.pread(src, min(end - off, 1 << 20), off), off)
        if n == 0:  # the source is shorter than we thought
            break
        off += n


def sparse_copy(src, dst, size):
    """Copy a file's data extents only (SEEK_DATA/SEEK_HOLE), then set the size: holes stay holes."""
    off = 0
    while off < size:
        try:
            data = os.lseek(src, off, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:
                break
            raise
        if data >= size:
            break
        hole = min(os.lseek(src, data, os.SEEK_HOLE), size)
        copy_range(src, dst, data, hole - data)
        off = hole
    os.ftruncate(dst, size)


class Node:
    """One inode: a regular file, a directory, a symlink or another kind (fifo, socket, device)."""

    __slots__ = (
        "id", "kind", "mode", "uid", "gid", "links", "durable_refs", "fds", "target",
        "pristine", "has_shadow", "shadow_linked", "dirty", "min_size",
        "entries", "durable", "pending",
    )

    def __init__(self, nid, kind, mode, uid, gid):
        self.id, self.kind, self.mode, self.uid, self.gid = nid, kind, mode, uid, gid
        self.links = {}  # (parent id, name) -> None: its live names, in order
        self.durable_refs = 0  # how many durable directory entries name it
        self.fds = {}  # file handle -> backing fd
        self.target = None  # a symlink's target
        self.pristine = False  # unchanged since mount: the backing inode is the durable content
        self.has_shadow = False  # STORE/<id> holds the durable content
        self.shadow_linked = False  # STORE/<id> is a hard link of the pristine backing inode
        self.dirty = []  # [start, end) ranges written since the last fsync, sorted, disjoint
        self.min_size = None  # the smallest size a truncate set since the last fsync
        if kind == "dir":
            self.entries, self.durable, self.pending = {}, {}, {}

    def add_dirty(self, start, end):
        d = self.dirty
        if not d or start > d[-1][1]:
            d.append([start, end])
            return
        if start >= d[-1][0]:  # overlaps or touches the last range: appends, rewrites of the tail
            d[-1][1] = max(d[-1][1], end)
            return
        i = bisect.bisect_left(d, [start, start])
        if i > 0 and d[i - 1][1] >= start:
            i -= 1
        j = i
        while j < len(d) and d[j][0] <= end:
            start, end = min(start, d[j][0]), max(end, d[j][1])
            j += 1
        d[i:j] = [[start, end]]

    def truncated(self, size):
        self.dirty = [[a, min(b, size)] for a, b in self.dirty if a < size]
        self.min_size = size if self.min_size is None else min(self.min_size, size)

    def dirty_bytes(self):
        return sum(b - a for a, b in self.dirty)


class Model:
    """The live and durable state, and the commit points; no FUSE in here."""

    def __init__(self, backing, store, rule):
        self.backing, self.store, self.rule = backing, store, rule
        self.nodes = {}
        self.next_id = ROOT
        self.dirty_dirs = set()
        self.frozen = False
        self.stats = dict.fromkeys(
            ["writes", "bytesWritten", "fsyncs", "fdatasyncs", "fsyncdirs", "bytesSynced", "commits", "namesCommitted", "copies", "bytesCopied"], 0
        )
        self.at_cut = None

    # --- nodes and names ---------------------------------------------------------------------------

    def new_node(self, kind, mode, uid=0, gid=0):
        node = Node(self.next_id, kind, mode, uid, gid)
        self.next_id += 1
        self.nodes[node.id] = node
        return node

    def node(self, nid):
        n = self.nodes.get(nid)
        if n is None:
            raise FUSEError(errno.ENOENT)
        return n

    def dir(self, nid):
        n = self.node(nid)
        if n.kind != "dir":
            raise FUSEError(errno.ENOTDIR)
        return n

    def path(self, node):
        parts = []
        while node.id != ROOT:
            if not node.links:
                raise FUSEError(errno.ENOENT)
            pid, name = next(iter(node.links))
            parts.append(name)
            node = self.nodes[pid]
        return os.path.join(self.backing, *reversed(parts)) if parts else self.backing

    def shadow(self, node):
        return os.path.join(self.store, b"%d" % node.id)

    def note(self, d, name, value):
        """Name `name` of directory d now points to `value` (an id, or None: gone) in the live view."""
        if d.durable.get(name) == value:
            d.pending.pop(name, None)
        else:
            d.pending[name] = value
        if d.pending:
            self.dirty_dirs.add(d.id)
        else:
            self.dirty_dirs.discard(d.id)

    def add_entry(self, d, name, node):
        d.entries[name] = node.id
        node.links[(d.id, name)] = None
        self.note(d, name, node.id)

    def remove_entry(self, d, name):
        node = self.nodes[d.entries.pop(name)]
        del node.links[(d.id, name)]
        self.note(d, name, None)
        return node

    def maybe_drop(self, node):
        """Forget a file nothing names, live or durably, and nobody has open; its shadow goes too."""
        if node.kind == "dir" or node.links or node.durable_refs or node.fds:
            return
        del self.nodes[node.id]
        if node.has_shadow or node.shadow_linked:
            try:
                os.unlink(self.shadow(node))
            except FileNotFoundError:
                pass

    def keep_before_drop(self, node, path):
        """Before the last live name of a pristine file goes while a durable name still points to it:
        keep its inode (its original content) by a hard link in the store. True if linked (undo: unlink)."""
        if node.kind != "reg" or not node.pristine or node.shadow_linked or len(node.links) != 1 or not node.durable_refs:
            return False
        os.link(path, self.shadow(node))
        node.shadow_linked = True
        return True

    def undo_keep(self, node):
        os.unlink(self.shadow(node))
        node.shadow_linked = False

    # --- the initial tree: durable as it is ----------------------------------------------------------

    def scan(self):
        st = os.lstat(self.backing)
        root = self.new_node("dir", st.st_mode, st.st_uid, st.st_gid)
        assert root.id == ROOT
        self._scan_dir(root, self.backing, {})
        for n in list(self.nodes.values()):
            if n.kind == "dir":
                n.durable = dict(n.entries)
                for nid in n.durable.values():
                    self.nodes[nid].durable_refs += 1

    def _scan_dir(self, d, path, inodes):
        with os.scandir(path) as it:
            for e in it:
                st = e.stat(follow_symlinks=False)
                key = (st.st_dev, st.st_ino)
                node = inodes.get(key) if not stat.S_ISDIR(st.st_mode) else None
                if node is None:
                    node = self.new_node(kind_of(st.st_mode), st.st_mode, st.st_uid, st.st_gid)
                    inodes[key] = node
                    if node.kind == "reg":
                        node.pristine = True
                    elif node.kind == "lnk":
                        node.target = os.readlink(e.path)
                d.entries[e.name] = node.id
                node.links[(d.id, e.name)] = None
                if node.kind == "dir":
                    self._scan_dir(node, e.path, inodes)

    # --- data: the copy before the first change, and fsync -------------------------------------------

    def materialize(self, node, src_fd):
        """The first change to a pristine file: copy its content (holes skipped) to the store first."""
        tmp = self.shadow(node) + b".tmp"
        dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            size = os.fstat(src_fd).st_size
            sparse_copy(src_fd, dst, size)
        finally:
            os.close(dst)
        os.rename(tmp, self.shadow(node))
        node.pristine, node.has_shadow, node.shadow_linked = False, True, False
        self.stats["copies"] += 1
        self.stats["bytesCopied"] += size

    def sync_file(self, node, fd):
        """fsync/fdatasync: the file's content and size become durable (only what changed is copied)."""
        if node.pristine or node.kind != "reg":
            return
        size = os.fstat(fd).st_size
        dst = os.open(self.shadow(node), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            if node.min_size is not None:
                os.ftruncate(dst, node.min_size)
            if os.fstat(dst).st_size != size:
                os.ftruncate(dst, size)
            for a, b in node.dirty:
                b = min(b, size)
                if a < b:
                    copy_range(fd, dst, a, b - a)
                    self.stats["bytesSynced"] += b - a
        finally:
            os.close(dst)
        node.has_shadow, node.dirty, node.min_size = True, [], None

    # --- names: the commit points ----------------------------------------------------------------------

    def commit_dir(self, d):
        for name, new in d.pending.items():
            old = d.durable.get(name)
            if new is None:
                del d.durable[name]
            else:
                d.durable[name] = new
                self.nodes[new].durable_refs += 1
            if old is not None:
                o = self.nodes[old]
                o.durable_refs -= 1
                self.maybe_drop(o)
            self.stats["namesCommitted"] += 1
        d.pending = {}
        self.dirty_dirs.discard(d.id)

    def commit_all(self):
        for nid in list(self.dirty_dirs):
            self.commit_dir(self.nodes[nid])
        self.stats["commits"] += 1

    def on_fsync(self, node, fd, datasync):
        self.stats["fdatasyncs" if datasync else "fsyncs"] += 1
        self.sync_file(node, fd)
        if self.rule == "ext4":
            self.commit_all()

    def on_fsyncdir(self, d):
        self.stats["fsyncdirs"] += 1
        if self.rule == "ext4":
            self.commit_all()
        else:
            self.commit_dir(d)
            self.stats["commits"] += 1

    # --- cut, stats, reconstruction ------------------------------------------------------------------

    def cut(self):
        if not self.frozen:
            self.frozen = True
            self.at_cut = self.losses()

    def losses(self):
        files = [n for n in self.nodes.values() if n.kind == "reg" and (n.dirty or n.min_size is not None)]
        return {
            "droppedBytes": sum(n.dirty_bytes() for n in files),
            "droppedFiles": len(files),
            "droppedNames": sum(len(self.nodes[d].pending) for d in self.dirty_dirs),
        }

    def report(self):
        return {"rule": self.rule, "frozen": self.frozen, **self.stats, "nodes": len(self.nodes), "now": self.losses(), "atCut": self.at_cut}

    def reconstruct(self, out):
        if os.path.exists(out) and os.listdir(out):
            raise ValueError(f"{os.fsdecode(out)} is not empty")
        os.makedirs(out, exist_ok=True)
        made = {"files": 0, "dirs": 0, "symlinks": 0, "hardlinks": 0, "skipped": 0, "bytes": 0}
        root = self.nodes[ROOT]
        self._rebuild_dir(root, out, {}, {ROOT}, made)
        os.chmod(out, stat.S_IMODE(root.mode))
        return made

    def _rebuild_dir(self, d, out, placed, seen_dirs, made):
        for name, nid in sorted(d.durable.items()):
            node, p = self.nodes[nid], os.path.join(out, name)
            if node.kind == "dir":
                if nid in seen_dirs:  # reachable twice (a dir renamed, one side committed): the first place wins
                    made["skipped"] += 1
                    continue
                seen_dirs.add(nid)
                os.mkdir(p, 0o700)
                self._rebuild_dir(node, p, placed, seen_dirs, made)
                made["dirs"] += 1
            elif nid in placed:
                os.link(placed[nid], p)
                made["hardlinks"] += 1
                continue
            elif node.kind == "reg":
                made["bytes"] += self._rebuild_file(node, p)
                made["files"] += 1
            elif node.kind == "lnk":
                os.symlink(node.target, p)
                made["symlinks"] += 1
            else:
                made["skipped"] += 1
                continue
            placed[nid] = p
            os.lchown(p, node.uid, node.gid)
            if node.kind != "lnk":
                os.chmod(p, stat.S_IMODE(node.mode))

    def _rebuild_file(self, node, p):
        if node.pristine:
            src = self.shadow(node) if node.shadow_linked else self.path(node)
        else:
            src = self.shadow(node) if node.has_shadow else None
        dst = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            if src is None:
                return 0
            sfd = os.open(src, os.O_RDONLY)
            try:
                size = os.fstat(sfd).st_size
                sparse_copy(sfd, dst, size)
                return size
            finally:
                os.close(sfd)
        finally:
            os.close(dst)


def kind_of(mode):
    if stat.S_ISREG(mode):
        return "reg"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "lnk"
    return "other"


def fuse_errors(fn):
    """OSError -> its errno; anything else is a bug: logged, EIO, and the filesystem keeps serving."""

    async def wrapper(*args):
        try:
            return await fn(*args)
        except FUSEError:
            raise
        except OSError as e:
            raise FUSEError(e.errno or errno.EIO) from None
        except Exception:
            traceback.print_exc(file=sys.stderr)
            raise FUSEError(errno.EIO) from None

    wrapper.__name__ = fn.__name__
    return wrapper


class Handle:
    __slots__ = ("node", "fd", "listing")

    def __init__(self, node, fd=None):
        self.node, self.fd, self.listing = node, fd, None


class Ops(pyfuse3.Operations):
    """The FUSE handlers: each does the operation on the backing tree, then updates the model."""

    def __init__(self, model):
        super().__init__()
        self.m = model
        self.handles = {}
        self.next_fh = 1

    def live(self):
        if self.m.frozen:
            raise FUSEError(errno.EIO)

    def attrs(self, node):
        if node.fds:
            st = os.fstat(next(iter(node.fds.values())))
        else:
            st = os.lstat(self.m.path(node))
        a = pyfuse3.EntryAttributes()
        for f in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_rdev", "st_size", "st_blksize", "st_blocks", "st_atime_ns", "st_mtime_ns", "st_ctime_ns"):
            setattr(a, f, getattr(st, f))
        a.st_ino = node.id
        a.generation = 0
        a.entry_timeout = a.attr_timeout = CACHE_SECONDS
        return a

    def new_handle(self, node, fd=None):
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = Handle(node, fd)
        if fd is not None:
            node.fds[fh] = fd
        return fh

    def child_path(self, d, name):
        return os.path.join(self.m.path(d), name)

    def owned(self, node, path, ctx):
        """A new inode belongs to its creator, as on a real filesystem (we run as root)."""
        if ctx.uid or ctx.gid:
            os.lchown(path, ctx.uid, ctx.gid)
        node.uid, node.gid = ctx.uid, ctx.gid

    # --- names -------------------------------------------------------------------------------------

    @fuse_errors
    async def lookup(self, parent_inode, name, ctx=None):
        self.live()
        d = self.m.dir(parent_inode)
        if name == b".":
            return self.attrs(d)
        if name == b"..":
            return self.attrs(self.m.nodes[next(iter(d.links))[0]] if d.links else d)
        nid = d.entries.get(name)
        if nid is None:
            raise FUSEError(errno.ENOENT)
        return self.attrs(self.m.nodes[nid])

    @fuse_errors
    async def getattr(self, inode, ctx=None):
        self.live()
        return self.attrs(self.m.node(inode))

    @fuse_errors
    async def readlink(self, inode, ctx):
        self.live()
        node = self.m.node(inode)
        return node.target if node.target is not None else os.readlink(self.m.path(node))

    @fuse_errors
    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        self.live()
        d = self.m.dir(parent_inode)
        path = self.child_path(d, name)
        mode &= ~ctx.umask
        os.mknod(path, mode, rdev)
        node = self.m.new_node(kind_of(mode), mode)
        self.owned(node, path, ctx)
        self.m.add_entry(d, name, node)
        return self.attrs(node)

    @fuse_errors
    async def mkdir(self, parent_inode, name, mode, ctx):
        self.live()
        d = self.m.dir(parent_inode)
        path = self.child_path(d, name)
        mode = (mode & ~ctx.umask & 0o7777) | stat.S_IFDIR
        os.mkdir(path, mode)
        node = self.m.new_node("dir", mode)
        self.owned(node, path, ctx)
        self.m.add_entry(d, name, node)
        return self.attrs(node)

    @fuse_errors
    async def symlink(self, parent_inode, name, target, ctx):
        self.live()
        d = self.m.dir(parent_inode)
        path = self.child_path(d, name)
        os.symlink(target, path)
        node = self.m.new_node("lnk", stat.S_IFLNK | 0o777)
        node.target = target
        self.owned(node, path, ctx)
        self.m.add_entry(d, name, node)
        return self.attrs(node)

    @fuse_errors
    async def link(self, inode, new_parent_inode, new_name, ctx):
        self.live()
        node, d = self.m.node(inode), self.m.dir(new_parent_inode)
        os.link(self.m.path(node), self.child_path(d, new_name))
        self.m.add_entry(d, new_name, node)
        return self.attrs(node)

    @fuse_errors
    async def unlink(self, parent_inode, name, ctx):
        self.live()
        d = self.m.dir(parent_inode)
        node = self.m.node(d.entries.get(name, 0))
        path = self.child_path(d, name)
        kept = self.m.keep_before_drop(node, path)
        try:
            os.unlink(path)
        except OSError:
            if kept:
                self.m.undo_keep(node)
            raise
        self.m.remove_entry(d, name)
        self.m.maybe_drop(node)

    @fuse_errors
    async def rmdir(self, parent_inode, name, ctx):
        self.live()
        d = self.m.dir(parent_inode)
        self.m.node(d.entries.get(name, 0))
        os.rmdir(self.child_path(d, name))
        self.m.remove_entry(d, name)

    @fuse_errors
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        self.live()
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise FUSEError(errno.EINVAL)
        src_dir, dst_dir = self.m.dir(parent_inode_old), self.m.dir(parent_inode_new)
        node = self.m.node(src_dir.entries.get(name_old, 0))
        target_id = dst_dir.entries.get(name_new)
        if target_id is not None and flags & pyfuse3.RENAME_NOREPLACE:
            raise FUSEError(errno.EEXIST)
        if target_id == node.id:
            return  # two names of one inode: rename does nothing
        src, dst = self.child_path(src_dir, name_old), self.child_path(dst_dir, name_new)
        target = self.m.nodes[target_id] if target_id is not None else None
        kept = target is not None and self.m.keep_before_drop(target, dst)
        try:
            os.rename(src, dst)
        except OSError:
            if kept:
                self.m.undo_keep(target)
            raise
        if target is not None:
            self.m.remove_entry(dst_dir, name_new)
        self.m.remove_entry(src_dir, name_old)
        self.m.add_entry(dst_dir, name_new, node)
        if target is not None:
            self.m.maybe_drop(target)

    # --- files -------------------------------------------------------------------------------------

    def open_backing(self, node, path, flags, mode=0):
        """The backing fd: always readable (fsync copies from it), offsets exactly as asked (no O_APPEND)."""
        if flags & os.O_ACCMODE == os.O_WRONLY:
            flags = (flags & ~os.O_ACCMODE) | os.O_RDWR
        return os.open(path, flags & ~OPEN_FLAGS_DROPPED | (flags & (os.O_CREAT | os.O_EXCL)), mode)

    @fuse_errors
    async def open(self, inode, flags, ctx):
        self.live()
        node = self.m.node(inode)
        path = self.m.path(node) if not node.fds else b"/proc/self/fd/%d" % next(iter(node.fds.values()))
        if flags & os.O_TRUNC and node.pristine:
            src = os.open(path, os.O_RDONLY)
            try:
                self.m.materialize(node, src)
            finally:
                os.close(src)
        fd = self.open_backing(node, path, flags & ~(os.O_CREAT | os.O_EXCL))
        if flags & os.O_TRUNC:
            node.truncated(0)
        return pyfuse3.FileInfo(fh=self.new_handle(node, fd))

    @fuse_errors
    async def create(self, parent_inode, name, mode, flags, ctx):
        self.live()
        d = self.m.dir(parent_inode)
        if name in d.entries:
            if flags & os.O_EXCL:
                raise FUSEError(errno.EEXIST)
            node = self.m.nodes[d.entries[name]]
            return await self.open(node.id, flags & ~os.O_CREAT, ctx), self.attrs(node)
        path = self.child_path(d, name)
        mode = mode & ~ctx.umask & 0o7777
        node = self.m.new_node("reg", stat.S_IFREG | mode)
        fd = self.open_backing(node, path, flags | os.O_CREAT | os.O_EXCL, mode)
        self.owned(node, path, ctx)
        self.m.add_entry(d, name, node)
        fh = self.new_handle(node, fd)
        return pyfuse3.FileInfo(fh=fh), self.attrs(node)

    @fuse_errors
    async def setattr(self, inode, attr, fields, fh, ctx):
        self.live()
        node = self.m.node(inode)
        fd = self.handles[fh].fd if fh is not None and fh in self.handles else next(iter(node.fds.values()), None)
        path = self.m.path(node) if fd is None else None
        if fields.update_size:
            self.truncate(node, fd, path, attr.st_size)
        if fields.update_mode and node.kind != "lnk":
            mode = stat.S_IMODE(attr.st_mode)
            os.chmod(fd if fd is not None else path, mode)
            node.mode = stat.S_IFMT(node.mode) | mode
        if fields.update_uid or fields.update_gid:
            uid = attr.st_uid if fields.update_uid else -1
            gid = attr.st_gid if fields.update_gid else -1
            os.chown(fd, uid, gid) if fd is not None else os.lchown(path, uid, gid)
            node.uid, node.gid = (uid if uid >= 0 else node.uid), (gid if gid >= 0 else node.gid)
        if fields.update_atime or fields.update_mtime:
            st = os.fstat(fd) if fd is not None else os.lstat(path)
            times = (attr.st_atime_ns if fields.update_atime else st.st_atime_ns, attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns)
            if fd is not None:
                os.utime(fd, ns=times)
            else:
                os.utime(path, ns=times, follow_symlinks=False)
        return self.attrs(node)

    def truncate(self, node, fd, path, size):
        if node.pristine:
            src = fd if fd is not None else os.open(path, os.O_RDONLY)
            try:
                self.m.materialize(node, src)
            finally:
                if fd is None:
                    os.close(src)
        if fd is not None:
            os.ftruncate(fd, size)
        else:
            os.truncate(path, size)
        node.truncated(size)

    @fuse_errors
    async def read(self, fh, off, size):
        self.live()
        return os.pread(self.handles[fh].fd, size, off)

    @fuse_errors
    async def write(self, fh, off, buf):
        self.live()
        h = self.handles[fh]
        node = h.node
        if node.pristine:
            self.m.materialize(node, h.fd)
        n = os.pwrite(h.fd, buf, off)
        node.add_dirty(off, off + n)
        self.m.stats["writes"] += 1
        self.m.stats["bytesWritten"] += n
        return n

    @fuse_errors
    async def flush(self, fh):
        self.live()

    @fuse_errors
    async def release(self, fh):
        h = self.handles.pop(fh, None)
        if h is None:
            return
        h.node.fds.pop(fh, None)
        os.close(h.fd)
        if h.node.id in self.m.nodes:
            self.m.maybe_drop(h.node)

    @fuse_errors
    async def fsync(self, fh, datasync):
        self.live()
        h = self.handles[fh]
        self.m.on_fsync(h.node, h.fd, datasync)

    # --- directories -------------------------------------------------------------------------------

    @fuse_errors
    async def opendir(self, inode, ctx):
        self.live()
        return self.new_handle(self.m.dir(inode))

    @fuse_errors
    async def readdir(self, fh, start_id, token):
        self.live()
        h = self.handles[fh]
        if start_id == 0 or h.listing is None:
            h.listing = sorted(h.node.entries.items())
        for i in range(start_id, len(h.listing)):
            name, nid = h.listing[i]
            node = self.m.nodes.get(nid)
            if node is None or h.node.entries.get(name) != nid:
                continue  # gone since the listing began
            if not pyfuse3.readdir_reply(token, name, self.attrs(node), i + 1):
                break

    @fuse_errors
    async def releasedir(self, fh):
        self.handles.pop(fh, None)

    @fuse_errors
    async def fsyncdir(self, fh, datasync):
        self.live()
        self.m.on_fsyncdir(self.handles[fh].node)

    @fuse_errors
    async def statfs(self, ctx):
        self.live()
        sv = os.statvfs(self.m.backing)
        s = pyfuse3.StatvfsData()
        for f in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail", "f_namemax"):
            setattr(s, f, getattr(sv, f))
        return s

    @fuse_errors
    async def access(self, inode, mode, ctx):
        self.live()
        self.m.node(inode)
        return True  # default_permissions: the kernel checks modes

    async def forget(self, inode_list):
        pass

    def invalidate_all(self):
        """After a cut: drop what the kernel caches (names, attributes, pages), so that nothing is served
        from the cache. Runs in a thread: the kernel may call us back while it invalidates."""
        for nid in list(self.m.nodes):
            try:
                pyfuse3.invalidate_inode(nid, attr_only=False)
            except OSError:
                pass


class Control:
    """The commands (see the top of this file); one at a time, between FUSE requests."""

    def __init__(self, ops, cancel):
        self.ops, self.m, self.cancel = ops, ops.m, cancel
        self.quitting = False

    async def run(self, line):
        cmd, _, arg = line.strip().partition(" ")
        try:
            if cmd == "cut":
                self.m.cut()
                await trio.to_thread.run_sync(self.ops.invalidate_all)
                return "ok " + json.dumps(self.m.at_cut)
            if cmd == "reconstruct" and arg:
                return "ok " + json.dumps(self.m.reconstruct(os.fsencode(arg)))
            if cmd == "stats":
                return "ok " + json.dumps(self.m.report())
            if cmd == "quit":
                self.quitting = True  # once the reply is out
                return "ok"
            return f"error unknown command {cmd!r} (cut, reconstruct OUTDIR, stats, quit)"
        except Exception as e:  # a failed command is reported, the filesystem keeps serving
            traceback.print_exc(file=sys.stderr)
            return f"error {type(e).__name__}: {e}".replace("\n", " ")

    async def serve_stdin(self):
        stream = trio.lowlevel.FdStream(os.dup(0))
        buf = b""
        while True:
            chunk = await stream.receive_some(65536)
            if not chunk:
                self.cancel()  # whoever started us is gone: unmount
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    reply = await self.run(line.decode())
                    sys.stdout.write(reply + "\n")
                    sys.stdout.flush()
                    if self.quitting:
                        self.cancel()

    async def serve_socket(self, path):
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        if os.path.exists(path):
            os.unlink(path)
        await sock.bind(path)
        sock.listen(4)
        async with trio.open_nursery() as n:
            while True:
                conn, _ = await sock.accept()
                n.start_soon(self.serve_conn, trio.SocketStream(conn))

    async def serve_conn(self, stream):
        buf = b""
        async with stream:
            while True:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        await stream.send_all((await self.run(line.decode()) + "\n").encode())
                        if self.quitting:
                            self.cancel()


async def serve(ops, args):
    async with trio.open_nursery() as n:
        control = Control(ops, n.cancel_scope.cancel)

        async def fuse_loop():
            await pyfuse3.main()
            n.cancel_scope.cancel()  # unmounted from outside

        async def signals():
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as received:
                async for _ in received:
                    n.cancel_scope.cancel()

        n.start_soon(fuse_loop)
        n.start_soon(signals)
        if args.control:
            n.start_soon(control.serve_socket, args.control)
        else:
            n.start_soon(control.serve_stdin)


def main():
    p = argparse.ArgumentParser(description="A FUSE passthrough filesystem that models what a power cut loses.")
    p.add_argument("--rule", choices=["ext4", "strict"], required=True)
    p.add_argument("--store", help="where durable contents live (default BACKING.powercut-store; created, removed at exit)")
    p.add_argument("--control", help="take commands on this unix socket instead of stdin")
    p.add_argument("backing")
    p.add_argument("mountpoint")
    args = p.parse_args()
    backing = os.fsencode(os.path.abspath(args.backing))
    store = os.fsencode(os.path.abspath(args.store or args.backing.rstrip("/") + ".powercut-store"))
    os.umask(0)
    os.makedirs(store, 0o700)  # fails if it exists: one daemon per store
    try:
        model = Model(backing, store, args.rule)
        model.scan()
        ops = Ops(model)
        options = set(pyfuse3.default_options) | {"fsname=powercut", "subtype=powercut", "allow_other"}
        pyfuse3.init(ops, args.mountpoint, options)
        try:
            print("ready", flush=True)
            trio.run(serve, ops, args)
        finally:
            pyfuse3.close(unmount=True)
    finally:
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
