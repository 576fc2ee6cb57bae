import sys, os
def splice(d, name):
    src = open(os.path.join(d, name)).read()
    for mark, part in (("--[[args]]", "args.lua"), ("--[[history]]", "history.lua")):
        assert src.count(mark) == 1, (name, mark)
        src = src.replace(mark, open(os.path.join(d, part)).read(), 1)
    return src
# usage: splice.py REDISLIMIT_DIR gcra.lua: the script as scripts.go builds it
if __name__ == "__main__":
    sys.stdout.write(splice(sys.argv[1], sys.argv[2]))
