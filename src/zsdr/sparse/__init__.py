"""zsdr.sparse"""
