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
import calendar, json, os, random, re, struct, sys, threading, time, traceback
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
    io.execute("rbd_header." + image_id, "rbd", "metadata_set", meta_encoded(meta))


def meta_encoded(meta):
    # cls_rbd's metadata_set input: a map<string, bufferlist>, Ceph-encoded.
    return struct.pack("<I", len(meta)) + b"".join(encoded(k.encode()) + encoded(v.encode()) for k, v in meta.items())


def image_id_of(io, name):
    # The id an image's id object holds (a Ceph-encoded string): what librbd's open reads first.
    raw = io.read("rbd_id." + name, 1024)
    return raw[4:4 + struct.unpack("<I", raw[:4])[0]].decode()


# The create as librbd's own create request makes it (librbd/image/CreateRequest.cc: the name in
# the pool's directory, the id object, the header), in three cls_rbd writes with the owner metadata
# in the header's own write: 3 OSD ops and a tenth of the client CPU of rbd_create4, which copies
# the whole Ceph configuration per call. Only for what that request would make the same way:
# features that need no object of their own, no data pool, no striping, a validated pool, no
# pool-level override of those options; anything else goes through librbd's create.
DIRECT_FEATURES = rbd.RBD_FEATURE_LAYERING | rbd.RBD_FEATURE_EXCLUSIVE_LOCK | rbd.RBD_FEATURE_DEEP_FLATTEN
SHAPING = ("rbd_default_data_pool", "rbd_default_stripe_unit", "rbd_default_stripe_count", "rbd_default_order", "rbd_validate_pool")
PLAN_TTL_S = 60
plan = {"order": None, "at": 0.0}


def direct_order(io):
    # The object order a direct create uses, or None when librbd's create must run (re-read every PLAN_TTL_S).
    with conn_lock:
        if time.monotonic() - plan["at"] < PLAN_TTL_S:
            return plan["order"]
        cluster = state["cluster"]
        plain = all(cluster.conf_get(k) in ("", "0") for k in SHAPING[:3])
        overrides = any(k[len("conf_"):] in SHAPING for k, _ in rbd.RBD().pool_metadata_list(io) if k.startswith("conf_"))
        try:
            validated = io.read("rbd_info", 64) == b"overwrite validated"
        except rados.ObjectNotFound:
            validated = False
        if not validated:
            return None  # librbd's create validates the pool; asked again at the next create
        order = int(cluster.conf_get("rbd_default_order"))
        plan["order"] = order if plain and not overrides and 12 <= order <= 25 else None
        plan["at"] = time.monotonic()
        return plan["order"]


def write_op(io, oid, steps, create):
    op = io.create_write_op()
    try:
        if create:
            op.new(rados.LIBRADOS_CREATE_EXCLUSIVE)
        for method, data in steps:
            op.execute("rbd", method, data)
        io.operate_write_op(op, oid)
    finally:
        io.release_write_op(op)


def direct_create(io, name, size, features, order, meta):
    # librbd's id: this client's instance id and 32 random bits, in hex, at most 24 characters.
    image_id = ("%x%x" % (state["cluster"].get_instance_id(), random.getrandbits(32)))[-24:]
    entry = encoded(name.encode()) + encoded(image_id.encode())
    try:
        write_op(io, "rbd_directory", [("dir_add_image", entry)], False)
    except rados.ObjectExists:
        raise rbd.ImageExists("RBD image %s already exists" % name, errno=17)
    try:
        write_op(io, "rbd_id." + name, [("set_id", encoded(image_id.encode()))], True)
        header = struct.pack("<QBQ", size, order, features) + encoded(("rbd_data." + image_id).encode()) + struct.pack("<q", -1)
        steps = [("create", header)] + ([("metadata_set", meta_encoded(meta))] if meta else [])
        try:
            write_op(io, "rbd_header." + image_id, steps, True)
        except Exception:
            undone(lambda: io.remove_object("rbd_id." + name))
            raise
    except Exception:
        undone(lambda: write_op(io, "rbd_directory", [("dir_remove_image", entry)], False))
        raise
    return image_id


def undone(step):
    # A failed create's clean-up, best effort: its own error must not replace the create's; what it
    # leaves is a remnant, which the name's next create or delete removes (clear_remnant).
    try:
        step()
    except (rbd.Error, rados.Error):
        pass


# Names this helper is creating now, each with the event set when its create ends: a directory
# entry of one of them without a header is a create under way, not a remnant (creates of one name by
# two journals are kept apart by the name's lock). Another create of that name waits for it to end.
making = {}
making_lock = threading.Lock()


def clear_remnant(io, name, creating=False):
    # What a create cut between its writes leaves (this helper's, or librbd's own request's, when its
    # process died there or its clean-up failed too): a directory entry, perhaps the id object, and no
    # header. librbd cannot open it and its name is taken; removed here, unless another create of it
    # runs (creating: the caller is the create of that name). True when the name is free now.
    with making_lock:
        if name in making and not creating:
            return False
    try:
        raw = io.execute("rbd_directory", "rbd", "dir_get_id", encoded(name.encode()), 1024)[1]
    except rados.ObjectNotFound:
        return True
    image_id = raw[4:4 + struct.unpack("<I", raw[:4])[0]].decode()
    try:
        io.stat("rbd_header." + image_id)
        return False  # an image: not a remnant
    except rados.ObjectNotFound:
        pass
    try:
        if image_id_of(io, name) == image_id:
            io.remove_object("rbd_id." + name)
    except rados.ObjectNotFound:
        pass
    write_op(io, "rbd_directory", [("dir_remove_image", encoded(name.encode()) + encoded(image_id.encode()))], False)
    print("removed the remnant of a cut create: image %s (id %s), a directory entry without a header" % (name, image_id), file=sys.stderr, flush=True)
    return True


def create_once(io, a, features):
    order = direct_order(io) if features & ~DIRECT_FEATURES == 0 else None
    if order is not None:
        return direct_create(io, a["name"], a["size"], features, order, a["meta"])
    rbd.RBD().create(io, a["name"], a["size"], old_format=False, features=features)
    image_id = image_id_of(io, a["name"])
    if a["meta"]:
        header_meta_set(io, image_id, a["meta"])
    return image_id


def op_create(io, a):
    # The image made with its owner metadata on its header: directly (3 OSD ops) where librbd's
    # create would make it the same, else librbd's create, its id read, the metadata written (4).
    # A remnant of a cut create under its name is removed first (clear_remnant), then made again.
    features = rbd.RBD().features_from_string(a["features"])
    with making_lock:
        under_way = making.get(a["name"])
        if under_way is None:
            making[a["name"]] = threading.Event()
    if under_way is not None:
        under_way.wait()
        raise rbd.ImageExists("image %s was made by another create meanwhile" % a["name"], errno=17)
    try:
        try:
            image_id = create_once(io, a, features)
        except rbd.ImageExists:
            if not clear_remnant(io, a["name"], creating=True):
                raise
            image_id = create_once(io, a, features)
    finally:
        with making_lock:
            making.pop(a["name"]).set()
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
    try:
        ro = rbd.Image(io, a["name"], read_only=True)
    except rbd.ImageNotFound:
        clear_remnant(io, a["name"])  # a cut create's remnant goes with its delete
        raise
    with ro:
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
