"""Value-filter expressions (DESIGN §2): one immutable tree (`tree`) that `t["x"]`, the nested
API and every engine adapter build, and its text syntax (`syntax`)."""
