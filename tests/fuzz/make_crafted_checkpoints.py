# How the crafted-* seeds of corpus/checkpoint were made: convnet-step1.pt with one
# tensor's stride or offset past its storage (PyTorch refuses them; libtorch loads them
# unchecked). Usage: make_crafted_checkpoints.py corpus/checkpoint/convnet-step1.pt OUTDIR
import sys, zipfile
src = sys.argv[1]
z = zipfile.ZipFile(src)
names = z.namelist()
pkl = [n for n in names if n.endswith("data.pkl")][0]
data = z.read(pkl)
def write(out, new):
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as w:
        for n in names:
            w.writestr(n, new if n == pkl else z.read(n))
# fc1.weight: sizes (10, 192), strides (192, 1) -> (65535, 1): 'K\xc0K\x01t' -> 'M\xff\xffK\x01t'
at = data.index(b"X\x0a\x00\x00\x00fc1.weight")
i = data.index(b"(K\xc0K\x01t", at)
write(sys.argv[2] + "/crafted-stride-65535", data[:i] + b"(M\xff\xffK\x01t" + data[i + 6:])
write(sys.argv[2] + "/crafted-stride-1000", data[:i] + b"(M\xe8\x03K\x01t" + data[i + 6:])
# fc1.bias: offset 1950 ('M\x9e\x07') -> 5000 ('M\x88\x13')
at = data.index(b"fc1.bias")
j = data.index(b"M\x9e\x07", at)
write(sys.argv[2] + "/crafted-offset-5000", data[:j] + b"M\x88\x13" + data[j + 3:])
