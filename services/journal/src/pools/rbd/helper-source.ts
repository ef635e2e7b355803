/**
 * The RBD helper: a long-lived Python process over Ceph's own librbd binding (python3-rbd, a
 * dependency of Debian's ceph-common), one per RBD pool of a journal. docs/backends.md says why
 * it is a helper and not the rbd CLI or a native addon (measured there).
 *
 * Protocol: JSON lines. stdin: first the settings line {user, monHost, keyFile, pool, conf,
 * workers}, then requests {id, op, args}; stdout: first {ready, version}, then one reply per
 * request, in any order: {id, ok: true, result} or {id, ok: false, errno, error}. A request runs
 * on a thread of a pool (librbd releases the GIL while it waits on the cluster). stdin's end
 * (the journal exited, even by SIGKILL) ends the helper. It never prints the key: librados reads
 * it from `keyFile` itself (the Secret's file), and error messages are librbd's own.
 *
 * The ops are the primitives of the pool backend (pools/rbd.ts composes them): no
 * policy here, only librbd calls and what they answer. Kept as a TypeScript string so the
 * compiled service carries it (the image holds dist/ only); RbdHelper writes it into its
 * private directory and runs it with Debian's python3.
 */
export const RBD_HELPER_SOURCE = String.raw`
import calendar, json, os, re, struct, sys, threading, time, traceback
from concurrent.futures import ThreadPoolExecutor
import rados, rbd

settings = json.loads(sys.stdin.readline())
USER_NS = rbd.RBD_SNAP_NAMESPACE_TYPE_USER
META_PREFIX = settings["metaPrefix"]
out_lock = threading.Lock()
conn_lock = threading.Lock()
state = {"cluster": None, "ioctx": None}


def send(obj):
    line = json.dumps(obj, separators=(",", ":"))
    with out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def ioctx():
    with conn_lock:
        if state["ioctx"] is None:
            conf = dict(settings["conf"])
            conf["mon_host"] = settings["monHost"]
            conf["keyfile"] = settings["keyFile"]
            cluster = rados.Rados(rados_id=settings["user"], conffile=os.devnull, conf=conf)
            try:
                cluster.connect()
                state["ioctx"] = cluster.open_ioctx(settings["pool"])
            except Exception:
                cluster.shutdown()
                raise
            state["cluster"] = cluster
        return state["ioctx"]


def describe(img, name, meta=None):
    # meta: the metadata just written (an image made now holds no other): not read back.
    snaps = [s["name"] for s in img.list_snaps() if s.get("namespace", USER_NS) == USER_NS]
    try:
        p = img.get_parent_image_spec()
        parent = {"pool": p["pool_name"], "image": p["image_name"], "snap": p["snap_name"]}
    except rbd.ImageNotFound:
        parent = None
    if meta is None:
        meta = {k: v for k, v in img.metadata_list() if k.startswith(META_PREFIX)}
    return {"name": name, "id": img.id(), "size": img.size(), "snaps": snaps, "parent": parent, "meta": meta,
            "created": calendar.timegm(img.create_timestamp().timetuple())}


def op_info(io, a):
    with rbd.Image(io, a["name"], read_only=True) as img:
        return describe(img, a["name"])


def encoded(b):
    return struct.pack("<I", len(b)) + b


def header_meta_set(io, image_id, meta):
    # The one cls_rbd call librbd's metadata_set makes, on the image's header object, without
    # opening the image (no watch registered, no header notify): for an image nobody has open
    # (just made, or about to go). Its input: a map<string, bufferlist>, Ceph-encoded.
    entries = b"".join(encoded(k.encode()) + encoded(v.encode()) for k, v in meta.items())
    io.execute("rbd_header." + image_id, "rbd", "metadata_set", struct.pack("<I", len(meta)) + entries)


def image_id_of(io, name):
    # The id an image's id object holds (a Ceph-encoded string): what librbd's open reads first.
    raw = io.read("rbd_id." + name, 1024)
    return raw[4:4 + struct.unpack("<I", raw[:4])[0]].decode()


def op_create(io, a):
    # The image made, its id read from its id object, its owner metadata written on its header:
    # 7 OSD ops in all (an open, the metadata write with its notify and the close took 19 more).
    rbd.RBD().create(io, a["name"], a["size"], old_format=False, features=rbd.RBD().features_from_string(a["features"]))
    image_id = image_id_of(io, a["name"])
    if a["meta"]:
        header_meta_set(io, image_id, a["meta"])
    return {"name": a["name"], "id": image_id, "size": a["size"], "snaps": [], "parent": None, "meta": a["meta"], "created": int(time.time())}


def op_clone(io, a):
    # The clone made, its owner metadata written on its header (as op_create), then described once
    # with its clone depth (opened read-only: no watch).
    features = rbd.RBD().features_from_string(a["features"])
    rbd.RBD().clone(io, a["parent"], a["snap"], io, a["name"], features=features)
    if a["meta"]:
        header_meta_set(io, image_id_of(io, a["name"]), a["meta"])
    with rbd.Image(io, a["name"], read_only=True) as img:
        info = describe(img, a["name"])
        info["depth"] = chain_depth(io, img)
        return info


def op_resize(io, a):
    with rbd.Image(io, a["name"]) as img:
        img.resize(a["size"], allow_shrink=False)
        return describe(img, a["name"])


def op_snap_create(io, a):
    with rbd.Image(io, a["name"]) as img:
        img.create_snap(a["snap"])
    return None


def op_snap_remove(io, a):
    with rbd.Image(io, a["name"]) as img:
        img.remove_snap(a["snap"])
    return None


def op_rename(io, a):
    rbd.RBD().rename(io, a["from"], a["to"])
    return None


def op_flatten(io, a):
    with rbd.Image(io, a["name"]) as img:
        img.flatten()
        return describe(img, a["name"])


def chain_depth(io, img):
    # How many ancestors the open image img has (it stays the caller's to close).
    depth, cur = 0, img
    try:
        while depth < 64:
            try:
                parent_id = cur.parent_id()
            except rbd.ImageNotFound:
                return depth
            if cur is not img:
                cur.close()
            cur = rbd.Image(io, image_id=parent_id, read_only=True)
            depth += 1
        return depth
    finally:
        if cur is not img:
            cur.close()


def op_depth(io, a):
    with rbd.Image(io, a["name"], read_only=True) as img:
        return chain_depth(io, img)


def op_remove(io, a):
    # User snapshots go first (one with clones moves to the trash namespace: clone v2), then the
    # image to the trash (its name is free at once), marked as ours to purge, then out of the
    # trash unless clones still need it: it stays there until they are gone (op_trash_purge).
    # An image someone has open (a node mapped it: a watcher) is refused: EBUSY. A read-only
    # open registers no watch of its own; a writable one only when there are snapshots to remove.
    with rbd.Image(io, a["name"], read_only=True) as ro:
        if list(ro.watchers_list()):
            raise rbd.ImageBusy("the image has watchers (mapped or open somewhere)", errno=16)
        image_id = ro.id()
        snaps = [s["name"] for s in ro.list_snaps() if s.get("namespace", USER_NS) == USER_NS]
    if snaps:
        with rbd.Image(io, a["name"]) as img:
            for s in snaps:
                img.remove_snap(s)
    header_meta_set(io, image_id, {a["mark"]: "1"})
    rbd.RBD().trash_move(io, a["name"], 0)
    try:
        rbd.RBD().trash_remove(io, image_id)
        return {"purged": True}
    except (rbd.ImageHasSnapshots, rbd.ImageBusy):
        return {"purged": False}


def op_names(io, a):
    return [i["name"] for i in rbd.RBD().list2(io)]


def op_list(io, a):
    names = [n for n in op_names(io, a) if re.match(a["pattern"], n)]
    if len(names) > a["max"]:
        raise rbd.ArgumentOutOfRange("the pool holds more than %d images" % a["max"], errno=34)

    def one(name):
        try:
            return op_info(io, {"name": name})
        except rbd.ImageNotFound:
            return None

    return [i for i in workers.map(one, names) if i is not None] if names else []


def op_trash_purge(io, a):
    # Only images this driver deleted (op_remove marked them): the pool may hold others' trash.
    purged, kept = 0, 0
    for e in list(rbd.RBD().trash_list(io)):
        if e["source"] != "USER":
            continue
        try:
            with rbd.Image(io, image_id=e["id"], read_only=True) as img:
                if not any(k == a["mark"] for k, _ in img.metadata_list()):
                    continue
            rbd.RBD().trash_remove(io, e["id"])
            purged += 1
        except (rbd.ImageHasSnapshots, rbd.ImageBusy, rbd.ImageNotFound):
            kept += 1
    return {"purged": purged, "kept": kept}


def op_trash_list(io, a):
    # The trash entries this driver deleted (marked): their owner metadata, and whether clones still
    # read from them (snapshots left in the trash namespace: clone v2 keeps them while clones need them).
    found = []
    for e in list(rbd.RBD().trash_list(io)):
        if e["source"] != "USER":
            continue
        try:
            with rbd.Image(io, image_id=e["id"], read_only=True) as img:
                meta = {k: v for k, v in img.metadata_list() if k.startswith(META_PREFIX)}
                if a["mark"] not in meta:
                    continue
                found.append({"name": e["name"], "id": e["id"], "size": img.size(), "meta": meta, "snaps": len(list(img.list_snaps())),
                              "deleted": calendar.timegm(e["deletion_time"].timetuple())})
        except rbd.ImageNotFound:
            continue
    return found


def op_trash_remove(io, a):
    # One entry, only if this driver marked it; kept (not an error) while clones need it.
    with rbd.Image(io, image_id=a["id"], read_only=True) as img:
        if not any(k == a["mark"] for k, _ in img.metadata_list()):
            raise rbd.InvalidArgument("trash entry %s was not deleted by this driver" % a["id"], errno=22)
    try:
        rbd.RBD().trash_remove(io, a["id"])
        return {"purged": True}
    except (rbd.ImageHasSnapshots, rbd.ImageBusy):
        return {"purged": False}


def op_pool_meta_get(io, a):
    try:
        return rbd.RBD().pool_metadata_get(io, a["key"])
    except (KeyError, rbd.ObjectNotFound):
        return None


def op_pool_meta_set(io, a):
    rbd.RBD().pool_metadata_set(io, a["key"], a["value"])
    return None


def op_df(io, a):
    r, out, err = state["cluster"].mon_command(json.dumps({"prefix": "df", "format": "json"}), b"")
    if r != 0:
        raise rados.Error(err, errno=-r)
    df = json.loads(out)
    pool = next((p for p in df.get("pools", []) if p["name"] == settings["pool"]), None)
    if pool is None:
        raise rados.ObjectNotFound("pool %s is not in the cluster's statistics" % settings["pool"], errno=2)
    return {"total": df["stats"]["total_bytes"], "free": pool["stats"]["max_avail"], "used": pool["stats"]["bytes_used"]}


OPS = {k[3:]: v for k, v in globals().items() if k.startswith("op_")}


def handle(req):
    try:
        op = OPS.get(req.get("op"))
        if op is None:
            send({"id": req.get("id"), "ok": False, "errno": 22, "error": "unknown op %r" % req.get("op")})
            return
        send({"id": req["id"], "ok": True, "result": op(ioctx(), req.get("args") or {})})
    except (rbd.Error, rados.Error) as e:
        send({"id": req["id"], "ok": False, "errno": getattr(e, "errno", None), "error": str(e)})
    except Exception as e:
        send({"id": req["id"], "ok": False, "errno": None, "error": "%s: %s" % (type(e).__name__, e)})
        traceback.print_exc(file=sys.stderr)


workers = ThreadPoolExecutor(max_workers=settings["workers"])
requests = ThreadPoolExecutor(max_workers=settings["workers"])
send({"ready": True, "version": ".".join(str(x) for x in rbd.RBD().version())})
for line in sys.stdin:
    if line.strip():
        requests.submit(handle, json.loads(line))
requests.shutdown(wait=True)
if state["cluster"] is not None:
    state["cluster"].shutdown()
`;
