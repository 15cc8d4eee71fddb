with

source as (

    select * from {{ source('toplist', 'listens_by_10m') }}

),

final as (

    select
        bucket_start,
        country,
        song_id,
        sumMerge(listens) as listens
    from source
    group by bucket_start, country, song_id

)

select * from final
